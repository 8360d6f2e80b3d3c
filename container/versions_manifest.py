"""Write /opt/trainstack/versions.json: the versions the built image actually carries.

Run at image build time (container/Dockerfile). Everything is read from files under a root directory and
from the Python distributions on a search path, so tests run it against a fake filesystem. The build
fails when torch or NCCL cannot be found (the base image is not what the Dockerfile expects), or when a
Python package pinned in an `--expect` file (the versions the training tests ran on) has another version;
other components that cannot be found are recorded as null and named on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

try:  # in the image this file sits next to preflight.py; in the repository both are in container/
    import preflight
except ModuleNotFoundError:
    from container import preflight

REQUIRED = ("torch", "nccl")
PYTHON_DISTRIBUTIONS = {
    "torch": ("torch",),
    "smddp": ("smdistributed-dataparallel",),
    "transformers": ("transformers",),
    "safetensors": ("safetensors",),
    "sagemaker_training": ("sagemaker-training",),
    "sagemaker_pytorch_training": ("sagemaker-pytorch-training",),
}
_TORCH_CUDA = re.compile(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)
_DUNDER_VERSION = re.compile(r"^__version__\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)
_EFA_INSTALLER = re.compile(r"^#\s*EFA installer version:\s*(\S+)", re.MULTILINE | re.IGNORECASE)
_PKGCONFIG_VERSION = re.compile(r"^Version:\s*(\S+)", re.MULTILINE)
_OFI_NCCL_VERSION = re.compile(rb"aws-ofi-nccl (\d+\.\d+\.\d+[\w.-]*)")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def _search(pattern: re.Pattern[str], text: str | None) -> str | None:
    match = pattern.search(text) if text else None
    return match.group(1) if match else None


def _distribution_version(names: Sequence[str], site_packages: Sequence[Path]) -> str | None:
    for name in names:
        for distribution in metadata.distributions(name=name, path=[str(path) for path in site_packages]):
            return distribution.version
    return None


def _package_file(site_packages: Sequence[Path], relative: str) -> str | None:
    for directory in site_packages:
        text = _read(directory / relative)
        if text is not None:
            return text
    return None


def _smp_version(site_packages: Sequence[Path]) -> str | None:
    """SMP v2 ships as torch.sagemaker inside AWS's torch build: read its __version__."""
    for name in ("__init__.py", "version.py", "_version.py"):
        relative = f"torch/sagemaker/{name}"
        version = _search(_DUNDER_VERSION, _package_file(site_packages, relative))
        if version:
            return version
    return None


def _ofi_nccl_version(host: preflight.Host) -> str | None:
    for plugin in preflight.ofi_plugins(host):
        match = _OFI_NCCL_VERSION.search(plugin.read_bytes())
        if match:
            return match.group(1).decode()
    return None


def collect(root: Path, site_packages: Sequence[Path], environ: dict[str, str]) -> dict[str, str | None]:
    host = preflight.Host(root=root, environ=environ)
    versions = {
        key: _distribution_version(names, site_packages) for key, names in PYTHON_DISTRIBUTIONS.items()
    }
    nccl = preflight.installed_nccl(host)
    cuda_json = _read(host.path("/usr/local/cuda/version.json"))
    versions.update(
        torch_cuda=_search(_TORCH_CUDA, _package_file(site_packages, "torch/version.py")),
        cuda_toolkit=json.loads(cuda_json).get("cuda", {}).get("version") if cuda_json else None,
        nccl=nccl[0] if nccl else None,
        efa_installer=_search(_EFA_INSTALLER, _read(host.path("/opt/amazon/efa_installed_packages"))),
        libfabric=_search(_PKGCONFIG_VERSION, _read(host.path("/opt/amazon/efa/lib/pkgconfig/libfabric.pc"))),
        aws_ofi_nccl=_ofi_nccl_version(host),
        smp=_smp_version(site_packages),
    )
    return dict(sorted(versions.items()))


def pinned(text: str) -> dict[str, str]:
    """`name==version` lines of a requirements file (comments and blank lines skipped)."""
    pins = {}
    for line in text.splitlines():
        requirement = line.split("#")[0].strip()
        if requirement:
            name, _, version = requirement.partition("==")
            pins[name.strip()] = version.strip()
    return pins


def unexpected_versions(pins: dict[str, str], site_packages: Sequence[Path]) -> list[str]:
    """Each pinned package whose installed version differs (a local label such as +cu124 aside)."""
    problems = []
    for name, version in sorted(pins.items()):
        installed = _distribution_version((name,), site_packages)
        if (installed or "").split("+")[0] != version:
            problems.append(f"{name} {installed or 'missing'} (tested: {version})")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--root", type=Path, default=Path("/"))
    parser.add_argument(
        "--site-packages",
        type=Path,
        action="append",
        help="where Python distributions are looked up (default: this interpreter's sys.path)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="also record a build fact, e.g. base_image=...",
    )
    parser.add_argument(
        "--expect",
        type=Path,
        action="append",
        default=[],
        help="requirements file of name==version pins the image must carry exactly",
    )
    args = parser.parse_args(argv)
    site_packages = args.site_packages or [Path(entry) for entry in sys.path if entry]
    versions: dict[str, str | None] = collect(args.root, site_packages, dict(os.environ))
    for item in args.set:
        key, _, value = item.partition("=")
        versions[key] = value
    missing_required = [key for key in REQUIRED if not versions.get(key)]
    if missing_required:
        print(
            f"versions manifest: {', '.join(missing_required)} not found in the image; "
            "the base image is not laid out as container/Dockerfile expects",
            file=sys.stderr,
        )
        return 1
    pins = {name: version for path in args.expect for name, version in pinned(path.read_text()).items()}
    mismatched = unexpected_versions(pins, site_packages)
    if mismatched:
        print(
            f"versions manifest: the image carries {', '.join(mismatched)}; the training tests ran on the "
            "pinned versions (container/base-image-versions.txt, container/requirements.txt): change the "
            "base image or the pins",
            file=sys.stderr,
        )
        return 1
    unknown = sorted(key for key, value in versions.items() if value is None)
    if unknown:
        print(f"versions manifest: not found, recorded as null: {', '.join(unknown)}", file=sys.stderr)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(versions, indent=2, sort_keys=True) + "\n")
    print(json.dumps(versions, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
