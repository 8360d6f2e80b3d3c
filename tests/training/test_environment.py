"""The training tests run on the versions the image carries (`make test` runs them in .venv-image)."""

from __future__ import annotations

from importlib import metadata

from tests.conftest import REPO_ROOT


def pinned_versions() -> dict[str, str]:
    pins = {}
    for name in ("container/base-image-versions.txt", "container/requirements.txt"):
        for line in (REPO_ROOT / name).read_text().splitlines():
            requirement = line.split("#")[0].strip()
            if requirement:
                package, version = requirement.split("==")
                pins[package] = version
    return pins


def test_this_environment_has_the_images_library_versions():
    pins = pinned_versions()
    assert {"torch", "numpy", "transformers", "safetensors"} <= pins.keys()
    installed = {package: metadata.version(package).split("+")[0] for package in pins}
    assert installed == pins
