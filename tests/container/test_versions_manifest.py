"""container/versions_manifest.py against a fake image filesystem laid out like AWS's SMP/DLC images."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from container import versions_manifest


def write(path: Path, content: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)


def distribution(site: Path, name: str, version: str) -> None:
    folder = site / f"{name.replace('-', '_')}-{version}.dist-info"
    write(folder / "METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.fixture
def image(tmp_path) -> tuple[Path, Path]:
    root = tmp_path / "root"
    site = root / "opt/conda/lib/python3.11/site-packages"
    write(root / "usr/local/lib/libnccl.so.2.23.4", b"\x7fELF")
    write(root / "usr/local/lib/libnccl.so.2.21.5", b"\x7fELF")  # an older copy next to it: newest wins
    write(root / "usr/local/lib/libnccl-net.so", b"\x7fELF\x00Initializing aws-ofi-nccl 1.13.2-aws\x00")
    write(
        root / "opt/amazon/efa_installed_packages",
        "# EFA installer version: 1.36.0\n# Debug packages installed: no\nlibfabric-aws 1.22.0amzn4.0\n",
    )
    write(root / "opt/amazon/efa/lib/pkgconfig/libfabric.pc", "Name: libfabric\nVersion: 1.22.0amzn4.0\n")
    cuda = {"cuda": {"name": "CUDA SDK", "version": "12.4.1"}}
    write(root / "usr/local/cuda/version.json", json.dumps(cuda))
    distribution(site, "torch", "2.5.1+cu124")
    distribution(site, "transformers", "4.44.2")
    distribution(site, "safetensors", "0.4.5")
    distribution(site, "smdistributed-dataparallel", "2.6.0")
    distribution(site, "sagemaker-training", "5.0.0")
    write(site / "torch/version.py", "__version__ = '2.5.1+cu124'\ncuda: Optional[str] = '12.4'\n")
    write(site / "torch/sagemaker/__init__.py", 'import os\n__version__ = "2.8.0"\n')
    return root, site


def run(root: Path, site: Path, output: Path, *extra: str) -> int:
    return versions_manifest.main(
        ["--output", str(output), "--root", str(root), "--site-packages", str(site), *extra]
    )


def test_manifest_records_what_the_image_carries(image, tmp_path):
    root, site = image
    output = tmp_path / "out/versions.json"
    assert run(root, site, output, "--set", "nccl_tests=v2.13.10") == 0
    assert json.loads(output.read_text()) == {
        "aws_ofi_nccl": "1.13.2-aws",
        "cuda_toolkit": "12.4.1",
        "efa_installer": "1.36.0",
        "libfabric": "1.22.0amzn4.0",
        "nccl": "2.23.4",
        "nccl_tests": "v2.13.10",
        "safetensors": "0.4.5",
        "sagemaker_pytorch_training": None,
        "sagemaker_training": "5.0.0",
        "smddp": "2.6.0",
        "smp": "2.8.0",
        "torch": "2.5.1+cu124",
        "torch_cuda": "12.4",
        "transformers": "4.44.2",
    }


def test_components_that_cannot_be_found_are_null_and_named(image, tmp_path, capsys):
    root, site = image
    (root / "opt/amazon/efa_installed_packages").unlink()
    output = tmp_path / "versions.json"
    assert run(root, site, output) == 0
    assert json.loads(output.read_text())["efa_installer"] is None
    assert "not found, recorded as null: efa_installer, sagemaker_pytorch_training" in capsys.readouterr().err


@pytest.mark.parametrize("remove", ["usr/local/lib/libnccl.so.2.23.4", "torch"])
def test_build_fails_without_torch_or_nccl(image, tmp_path, capsys, remove):
    root, site = image
    if remove == "torch":
        for folder in site.glob("torch-*.dist-info"):
            (folder / "METADATA").unlink()
            folder.rmdir()
    else:
        for library in (root / "usr/local/lib").glob("libnccl.so.*"):
            library.unlink()
    output = tmp_path / "versions.json"
    assert run(root, site, output) == 1
    assert not output.exists()
    expected = "torch" if remove == "torch" else "nccl"
    assert f"versions manifest: {expected} not found in the image" in capsys.readouterr().err


def test_build_fails_when_the_image_differs_from_the_tested_versions(image, tmp_path, capsys):
    root, site = image
    pins = tmp_path / "base-image-versions.txt"
    pins.write_text("# comment\ntorch==2.5.1\nnumpy==1.26.4\n")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("transformers==4.44.2\nsafetensors==0.4.5\n")
    expect = ("--expect", str(pins), "--expect", str(requirements))
    distribution(site, "numpy", "1.26.4")
    assert run(root, site, tmp_path / "ok.json", *expect) == 0  # torch 2.5.1+cu124 is 2.5.1

    distribution(site, "numpy", "2.1.0")
    for folder in site.glob("numpy-1.26.4.dist-info"):
        (folder / "METADATA").unlink()
        folder.rmdir()
    output = tmp_path / "versions.json"
    assert run(root, site, output, *expect) == 1
    assert not output.exists()
    assert "the image carries numpy 2.1.0 (tested: 1.26.4)" in capsys.readouterr().err


def test_the_repository_pins_are_what_the_dockerfile_checks():
    repository = Path(__file__).resolve().parents[2]
    dockerfile = (repository / "container/Dockerfile").read_text()
    for name in ("base-image-versions.txt", "requirements.txt"):
        assert f"--expect /opt/trainstack/tested/{name}" in dockerfile
    pins = versions_manifest.pinned((repository / "container/base-image-versions.txt").read_text())
    assert pins == {"torch": "2.5.1", "numpy": "1.26.4"}
