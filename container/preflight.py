"""trainstack preflight: checks one host's GPU/EFA/NCCL stack before training starts.

Runs in the training image before the SageMaker toolkit launches the entry point (container/train),
once per host. Problems that would otherwise surface as a hang at NCCL init or as a silent fallback to
TCP sockets fail the job within seconds with a message starting "TRAINSTACK PREFLIGHT FAILED:", which
SageMaker shows as the job's FailureReason (written to /opt/ml/output/failure).

Checks:
- EFA devices (found in /sys/class/infiniband by their driver) => `fi_info -p efa` must succeed and the
  aws-ofi-nccl plugin must be present.
- `ldd` of every aws-ofi-nccl plugin found resolves every library.
- The NCCL version PyTorch reports equals the installed libnccl.
- Visible GPUs equal TRAINSTACK_EXPECTED_GPUS (set by the job request from the instance catalog).

With EFA devices present it chooses FI_PROVIDER=efa (libfabric fails instead of using another provider)
and NCCL_NET="AWS Libfabric" (NCCL fails instead of falling back to sockets), unless already set; NCCL_*
choices also go to /etc/nccl.conf, which NCCL reads in every process on the host (ranks that mpirun starts
on other hosts do not inherit this shell's environment), the environment still taking precedence. It never
sets NCCL_PROTO or FI_EFA_USE_DEVICE_RDMA: the plugin sets NCCL_PROTO itself where EFA needs it, and
libfabric uses device RDMA whenever the device supports it when the variable is unset (fi_efa(7)).

Standard library only: the image's Python runs it, and tests inject the filesystem root, the
environment and the command runner.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

FAILED_PREFIX = "TRAINSTACK PREFLIGHT FAILED:"
SKIP_VARIABLE = "TRAINSTACK_SKIP_PREFLIGHT"
EXPECTED_GPUS_VARIABLE = "TRAINSTACK_EXPECTED_GPUS"
# The name aws-ofi-nccl registers with NCCL; NCCL_NET makes NCCL fail rather than pick another network.
OFI_NCCL_NET_NAME = "AWS Libfabric"
COMMAND_TIMEOUT_S = 20.0
# Importing torch and counting GPUs takes a few seconds; more means something is wrong with the driver.
TORCH_PROBE_TIMEOUT_S = 90.0
# Where the DLC/SMP images and the EFA installer put libnccl and the plugin, after LD_LIBRARY_PATH.
DEFAULT_LIBRARY_DIRS = (
    "/usr/local/lib",
    "/opt/amazon/ofi-nccl/lib",
    "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu",
    "/opt/aws-ofi-nccl/lib",
    "/usr/lib/x86_64-linux-gnu",
)
OFI_PLUGIN_PATTERNS = ("libnccl-net.so", "libnccl-net-ofi.so", "libnccl-net-aws-ofi.so")
_LIBNCCL_VERSION = re.compile(r"^libnccl\.so\.(\d+\.\d+\.\d+)$")
TORCH_PROBE = (
    "import json, torch\n"
    "nccl = None\n"
    "if torch.version.cuda:\n"
    "    nccl = '.'.join(str(part) for part in torch.cuda.nccl.version()[:3])\n"
    "print(json.dumps({'torch': torch.__version__, 'nccl': nccl, 'gpus': torch.cuda.device_count()}))\n"
)


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    output: str


Runner = Callable[[Sequence[str], float], CommandResult]


def run_command(argv: Sequence[str], timeout: float) -> CommandResult:
    """Run a command, stdout and stderr together; a missing binary or a timeout is a failed result."""
    try:
        completed = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        return CommandResult(127, f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return CommandResult(124, f"{argv[0]}: no answer within {timeout:.0f} s")
    return CommandResult(completed.returncode, completed.stdout + completed.stderr)


@dataclass
class Host:
    """What the preflight reads: files under `root`, the environment, and commands it runs."""

    root: Path = Path("/")
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    run: Runner = run_command

    def path(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    exports: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.problems

    def failure_message(self) -> str:
        return f"{FAILED_PREFIX} " + "; ".join(self.problems)


def efa_devices(host: Host) -> list[str]:
    """RDMA devices bound to the efa driver (sysfs), e.g. ['rdmap16s27']."""
    infiniband = host.path("/sys/class/infiniband")
    if not infiniband.is_dir():
        return []
    devices = []
    for device in sorted(infiniband.iterdir()):
        driver_link = device / "device" / "driver"
        try:
            driver = Path(os.readlink(driver_link)).name
        except OSError:
            driver = ""
        if driver == "efa" or (not driver and device.name.startswith("efa")):
            devices.append(device.name)
    return devices


def library_dirs(host: Host) -> list[Path]:
    """LD_LIBRARY_PATH first (the order the loader uses), then the image's default locations."""
    entries = [entry for entry in host.environ.get("LD_LIBRARY_PATH", "").split(":") if entry]
    ordered = list(dict.fromkeys([*entries, *DEFAULT_LIBRARY_DIRS]))
    return [host.path(entry) for entry in ordered if host.path(entry).is_dir()]


def ofi_plugins(host: Host) -> list[Path]:
    found: list[Path] = []
    for directory in library_dirs(host):
        for name in OFI_PLUGIN_PATTERNS:
            candidate = directory / name
            if candidate.exists() and candidate.resolve() not in {path.resolve() for path in found}:
                found.append(candidate)
    return found


def installed_nccl(host: Host) -> tuple[str, Path] | None:
    """The first libnccl.so.X.Y.Z in loader order: the NCCL a process without its own copy loads."""
    for directory in library_dirs(host):
        versions = sorted(
            (match.group(1), entry)
            for entry in directory.iterdir()
            if (match := _LIBNCCL_VERSION.match(entry.name))
        )
        if versions:
            return versions[-1]
    return None


def _first_line(text: str) -> str:
    stripped = [line.strip() for line in text.splitlines() if line.strip()]
    return stripped[0] if stripped else "(no output)"


def _last_line(text: str) -> str:
    stripped = [line.strip() for line in text.splitlines() if line.strip()]
    return stripped[-1] if stripped else "(no output)"


def _display(host: Host, path: Path) -> str:
    return "/" + str(path.relative_to(host.root)) if path.is_relative_to(host.root) else str(path)


def check_efa(host: Host, report: Report, devices: list[str]) -> None:
    if not devices:
        report.lines.append("EFA devices: none (NCCL uses TCP between hosts; fine on one host)")
        return
    report.lines.append(f"EFA devices: {', '.join(devices)} ({len(devices)})")
    result = host.run(["fi_info", "-p", "efa", "-t", "FI_EP_RDM"], COMMAND_TIMEOUT_S)
    if result.returncode != 0 or "efa" not in result.output:
        report.problems.append(
            f"EFA devices are present but `fi_info -p efa` failed ({_first_line(result.output)}): "
            "libfabric cannot open them, so NCCL would not use EFA"
        )
    else:
        report.lines.append("fi_info -p efa: ok")


def check_ofi_plugin(host: Host, report: Report, devices: list[str]) -> list[Path]:
    plugins = ofi_plugins(host)
    if not plugins:
        if devices:
            report.problems.append(
                "EFA devices are present but no aws-ofi-nccl plugin (libnccl-net*.so) is on the library "
                "path: NCCL would fall back to TCP sockets"
            )
        else:
            report.lines.append("aws-ofi-nccl plugin: not found (not needed without EFA)")
        return plugins
    for plugin in plugins:
        result = host.run(["ldd", str(plugin)], COMMAND_TIMEOUT_S)
        missing = sorted(
            {line.split("=>")[0].strip() for line in result.output.splitlines() if "not found" in line}
        )
        shown = _display(host, plugin)
        if missing:
            report.problems.append(
                f"the aws-ofi-nccl plugin {shown} cannot load {', '.join(missing)}: "
                "NCCL would silently fall back to TCP sockets"
            )
        elif result.returncode != 0:
            report.problems.append(f"`ldd {shown}` failed: {_first_line(result.output)}")
        else:
            report.lines.append(f"aws-ofi-nccl plugin: {shown} (all libraries resolve)")
    return plugins


def probe_torch(host: Host) -> dict[str, object] | str:
    """torch's version, its NCCL version and the visible GPU count, or why they could not be read."""
    result = host.run([sys.executable, "-c", TORCH_PROBE], TORCH_PROBE_TIMEOUT_S)
    if result.returncode != 0:
        return _last_line(result.output)
    try:
        return json.loads(result.output.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return f"unreadable answer {result.output.strip()[:200]!r}"


def check_nccl_and_gpus(host: Host, report: Report) -> None:
    probe = probe_torch(host)
    if isinstance(probe, str):
        report.problems.append(f"cannot import torch to read its NCCL version and GPU count: {probe}")
        return
    torch_nccl = probe.get("nccl")
    installed = installed_nccl(host)
    if installed is None:
        report.lines.append(f"NCCL: torch reports {torch_nccl}; no libnccl.so.X.Y.Z on the library path")
    elif torch_nccl is not None and torch_nccl != installed[0]:
        report.problems.append(
            f"PyTorch reports NCCL {torch_nccl} but the image's library is NCCL {installed[0]} "
            f"({_display(host, installed[1])}): a second NCCL is loaded, which the aws-ofi-nccl plugin "
            "was not built against"
        )
    else:
        report.lines.append(f"NCCL: {installed[0]} ({_display(host, installed[1])}), torch agrees")

    visible = probe.get("gpus")
    expected_text = host.environ.get(EXPECTED_GPUS_VARIABLE, "").strip()
    if not expected_text:
        report.lines.append(f"GPUs: {visible} visible ({EXPECTED_GPUS_VARIABLE} not set: not compared)")
        return
    if not expected_text.isdigit():
        report.problems.append(f"{EXPECTED_GPUS_VARIABLE} must be a whole number, not {expected_text!r}")
        return
    if visible != int(expected_text):
        report.problems.append(
            f"{visible} GPUs are visible but the instance type has {expected_text} "
            f"({EXPECTED_GPUS_VARIABLE}): a GPU or its driver is missing on this host"
        )
    else:
        report.lines.append(f"GPUs: {visible} visible, {expected_text} expected")


def choose_exports(host: Host, report: Report, devices: list[str], plugins: list[Path]) -> None:
    if not devices:
        return
    wanted = {"FI_PROVIDER": "efa"}
    if plugins:
        wanted["NCCL_NET"] = OFI_NCCL_NET_NAME
    for name, value in wanted.items():
        if name in host.environ:
            report.lines.append(f"kept {name}={host.environ[name]!r} from the job's environment")
        else:
            report.exports[name] = value
    if report.exports:
        chosen = " ".join(f"{name}={shlex.quote(value)}" for name, value in report.exports.items())
        report.lines.append(f"set {chosen}")


def instance_label(host: Host) -> str:
    """'algo-1, ml.p4d.24xlarge' from SageMaker's resource config, when present."""
    config = host.path("/opt/ml/input/config/resourceconfig.json")
    try:
        data = json.loads(config.read_text())
    except (OSError, json.JSONDecodeError):
        return "not on SageMaker"
    return f"{data.get('current_host', '?')}, {data.get('current_instance_type', '?')}"


def run_preflight(host: Host) -> Report:
    report = Report()
    devices = efa_devices(host)
    check_efa(host, report, devices)
    plugins = check_ofi_plugin(host, report, devices)
    check_nccl_and_gpus(host, report)
    choose_exports(host, report, devices, plugins)
    return report


def main(argv: Sequence[str] | None = None, host: Host | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exports-file", type=Path, help="write the chosen variables here as `export` lines")
    parser.add_argument(
        "--nccl-conf",
        type=Path,
        default=Path("/etc/nccl.conf"),
        help="NCCL's config file, where the NCCL_* choices are appended",
    )
    parser.add_argument(
        "--failure-file",
        type=Path,
        default=Path("/opt/ml/output/failure"),
        help="where SageMaker reads a failed job's reason (written only on failure)",
    )
    args = parser.parse_args(argv)
    host = host or Host()
    started = time.monotonic()
    report = run_preflight(host)
    elapsed = time.monotonic() - started

    print(f"trainstack preflight ({instance_label(host)})", flush=True)
    for line in report.lines:
        print(f"  {line}", flush=True)
    if args.exports_file:
        args.exports_file.write_text(
            "".join(f"export {name}={shlex.quote(value)}\n" for name, value in report.exports.items())
        )
    nccl_settings = {name: value for name, value in report.exports.items() if name.startswith("NCCL_")}
    if nccl_settings:
        try:
            with args.nccl_conf.open("a") as conf:
                conf.write("".join(f"{name}={value}\n" for name, value in nccl_settings.items()))
        except OSError as error:
            print(f"  cannot write {args.nccl_conf} ({error.strerror}): NCCL settings apply locally only")
    if report.passed:
        print(f"trainstack preflight passed in {elapsed:.1f} s ({SKIP_VARIABLE}=1 skips it)", flush=True)
        return 0
    message = report.failure_message()
    print(message, file=sys.stderr, flush=True)
    if args.failure_file.parent.is_dir():
        args.failure_file.write_text(message + "\n")
    return 1


if __name__ == "__main__":
    sys.exit(main())
