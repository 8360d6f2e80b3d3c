"""container/preflight.py against fake hosts: a sysfs tree, library directories and scripted commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from container import preflight
from container.preflight import CommandResult, Host

RESOURCE_CONFIG = {"current_host": "algo-2", "current_instance_type": "ml.p4d.24xlarge"}
HEALTHY_FI_INFO = "provider: efa\n    fabric: efa\n    domain: rdmap16s27-rdm\n    version: 122.0\n"
HEALTHY_LDD = (
    "\tlinux-vdso.so.1 (0x00007ffd)\n"
    "\tlibfabric.so.1 => /opt/amazon/efa/lib/libfabric.so.1 (0x00007f)\n"
    "\tlibcudart.so.12 => /usr/local/cuda/lib64/libcudart.so.12 (0x00007f)\n"
)


class FakeCommands:
    """Answers commands by program name (the torch probe by '-c'); records what was run."""

    def __init__(self, answers: dict[str, CommandResult]):
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> CommandResult:
        self.calls.append(list(argv))
        key = "torch" if "-c" in argv else Path(argv[0]).name
        return self.answers.get(key, CommandResult(127, f"{argv[0]}: command not found"))

    def ran(self, program: str) -> bool:
        return any(Path(call[0]).name == program for call in self.calls)


def torch_answer(nccl: str | None = "2.23.4", gpus: int = 8) -> CommandResult:
    answer = json.dumps({"torch": "2.5.1", "nccl": nccl, "gpus": gpus})
    return CommandResult(0, f"some warning\n{answer}\n")


def make_host(
    root: Path,
    *,
    efa: Sequence[str] = ("rdmap16s27", "rdmap32s27"),
    plugin: bool = True,
    libnccl: str | None = "2.23.4",
    environ: dict[str, str] | None = None,
    answers: dict[str, CommandResult] | None = None,
) -> tuple[Host, FakeCommands]:
    drivers = root / "sys/bus/pci/drivers"
    for name in efa:
        (drivers / "efa").mkdir(parents=True, exist_ok=True)
        device = root / "sys/class/infiniband" / name / "device"
        device.mkdir(parents=True)
        os.symlink("../../../../bus/pci/drivers/efa", device / "driver")
    # A non-EFA RDMA device (e.g. a Mellanox NIC) must not count.
    (drivers / "mlx5_core").mkdir(parents=True, exist_ok=True)
    mlx = root / "sys/class/infiniband/mlx5_0/device"
    mlx.mkdir(parents=True)
    os.symlink("../../../../bus/pci/drivers/mlx5_core", mlx / "driver")
    lib = root / "usr/local/lib"
    lib.mkdir(parents=True)
    if plugin:
        (lib / "libnccl-net.so").write_bytes(b"\x7fELF aws-ofi-nccl 1.13.2-aws")
    if libnccl:
        (lib / f"libnccl.so.{libnccl}").write_bytes(b"\x7fELF")
        os.symlink(f"libnccl.so.{libnccl}", lib / "libnccl.so.2")
    commands = FakeCommands(
        {
            "fi_info": CommandResult(0, HEALTHY_FI_INFO),
            "ldd": CommandResult(0, HEALTHY_LDD),
            "torch": torch_answer(),
            **(answers or {}),
        }
    )
    env = {"TRAINSTACK_EXPECTED_GPUS": "8", **(environ or {})}
    return Host(root=root, environ=env, run=commands), commands


def test_healthy_efa_host_passes_and_pins_efa_for_libfabric_and_nccl(tmp_path):
    host, commands = make_host(tmp_path)
    report = preflight.run_preflight(host)
    assert report.passed, report.problems
    assert report.exports == {"FI_PROVIDER": "efa", "NCCL_NET": "AWS Libfabric"}
    assert ["fi_info", "-p", "efa", "-t", "FI_EP_RDM"] in commands.calls
    assert ["ldd", str(tmp_path / "usr/local/lib/libnccl-net.so")] in commands.calls
    assert "EFA devices: rdmap16s27, rdmap32s27 (2)" in report.lines
    # Never chosen by the preflight: the plugin and libfabric decide these themselves.
    assert not {"NCCL_PROTO", "FI_EFA_USE_DEVICE_RDMA"} & set(report.exports)


def test_host_without_efa_needs_neither_fi_info_nor_plugin_and_sets_nothing(tmp_path):
    host, commands = make_host(tmp_path, efa=(), plugin=False)
    report = preflight.run_preflight(host)
    assert report.passed, report.problems
    assert report.exports == {}
    assert not commands.ran("fi_info")


def test_fi_info_failure_with_efa_devices_fails(tmp_path):
    host, _ = make_host(
        tmp_path, answers={"fi_info": CommandResult(61, "fi_getinfo: -61 (No data available)\n")}
    )
    report = preflight.run_preflight(host)
    assert not report.passed
    assert "`fi_info -p efa` failed (fi_getinfo: -61 (No data available))" in report.failure_message()


def test_fi_info_that_lists_another_provider_fails(tmp_path):
    host, _ = make_host(tmp_path, answers={"fi_info": CommandResult(0, "provider: tcp\n")})
    assert "`fi_info -p efa` failed" in preflight.run_preflight(host).failure_message()


def test_efa_without_the_ofi_plugin_fails_naming_the_socket_fallback(tmp_path):
    host, _ = make_host(tmp_path, plugin=False)
    message = preflight.run_preflight(host).failure_message()
    assert "no aws-ofi-nccl plugin" in message and "TCP sockets" in message


def test_plugin_with_an_unresolved_library_fails_naming_it(tmp_path):
    ldd = HEALTHY_LDD + "\tlibhwloc.so.15 => not found\n\tlibcudart.so.12 => not found\n"
    host, _ = make_host(tmp_path, answers={"ldd": CommandResult(0, ldd)})
    message = preflight.run_preflight(host).failure_message()
    assert message.startswith(preflight.FAILED_PREFIX)
    assert "/usr/local/lib/libnccl-net.so cannot load libcudart.so.12, libhwloc.so.15" in message


def test_plugin_found_through_ld_library_path_is_checked(tmp_path):
    host, commands = make_host(tmp_path, plugin=False)
    ofi = tmp_path / "opt/amazon/ofi-nccl/lib/x86_64-linux-gnu"
    ofi.mkdir(parents=True)
    (ofi / "libnccl-net-ofi.so").write_bytes(b"\x7fELF")
    host.environ["LD_LIBRARY_PATH"] = "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu:/nonexistent"
    assert preflight.run_preflight(host).passed
    assert ["ldd", str(ofi / "libnccl-net-ofi.so")] in commands.calls


def test_torch_reporting_another_nccl_than_the_installed_one_fails(tmp_path):
    host, _ = make_host(tmp_path, answers={"torch": torch_answer(nccl="2.21.5")})
    message = preflight.run_preflight(host).failure_message()
    assert "PyTorch reports NCCL 2.21.5 but the image's library is NCCL 2.23.4" in message
    assert "/usr/local/lib/libnccl.so.2.23.4" in message


def test_torch_that_cannot_be_imported_fails_with_its_last_error_line(tmp_path):
    traceback = "Traceback (most recent call last):\n  ...\nImportError: libcudnn.so.9: cannot open\n"
    failure = CommandResult(1, traceback)
    host, _ = make_host(tmp_path, answers={"torch": failure})
    message = preflight.run_preflight(host).failure_message()
    assert "cannot import torch" in message and "ImportError: libcudnn.so.9: cannot open" in message


def test_fewer_visible_gpus_than_the_instance_type_has_fails(tmp_path):
    host, _ = make_host(tmp_path, answers={"torch": torch_answer(gpus=7)})
    message = preflight.run_preflight(host).failure_message()
    assert "7 GPUs are visible but the instance type has 8 (TRAINSTACK_EXPECTED_GPUS)" in message


def test_expected_gpus_that_is_not_a_number_fails(tmp_path):
    host, _ = make_host(tmp_path, environ={"TRAINSTACK_EXPECTED_GPUS": "eight"})
    assert "TRAINSTACK_EXPECTED_GPUS must be a whole number, not 'eight'" in (
        preflight.run_preflight(host).failure_message()
    )


def test_unset_expected_gpus_reports_the_count_without_comparing(tmp_path):
    host, _ = make_host(tmp_path, answers={"torch": torch_answer(gpus=3)})
    del host.environ["TRAINSTACK_EXPECTED_GPUS"]
    report = preflight.run_preflight(host)
    assert report.passed
    assert "GPUs: 3 visible (TRAINSTACK_EXPECTED_GPUS not set: not compared)" in report.lines


def test_every_problem_is_reported_at_once(tmp_path):
    host, _ = make_host(
        tmp_path,
        answers={
            "fi_info": CommandResult(1, "error"),
            "torch": torch_answer(nccl="2.20.0", gpus=4),
        },
    )
    assert len(preflight.run_preflight(host).problems) == 3


def test_variables_the_job_sets_are_kept(tmp_path):
    host, _ = make_host(tmp_path, environ={"FI_PROVIDER": "efa;ofi_rxm"})
    report = preflight.run_preflight(host)
    assert report.exports == {"NCCL_NET": "AWS Libfabric"}
    assert "kept FI_PROVIDER='efa;ofi_rxm' from the job's environment" in report.lines


def test_main_writes_failure_reason_for_sagemaker_and_exits_nonzero(tmp_path, capsys):
    host, _ = make_host(tmp_path / "root", answers={"torch": torch_answer(gpus=4)})
    failure = tmp_path / "output" / "failure"
    failure.parent.mkdir()
    resourceconfig = tmp_path / "root/opt/ml/input/config/resourceconfig.json"
    resourceconfig.parent.mkdir(parents=True)
    resourceconfig.write_text(json.dumps(RESOURCE_CONFIG))
    exports = tmp_path / "exports.sh"
    arguments = ["--failure-file", str(failure), "--exports-file", str(exports)]
    arguments += ["--nccl-conf", str(tmp_path / "nccl.conf")]
    assert preflight.main(arguments, host) == 1
    out, err = capsys.readouterr()
    assert out.startswith("trainstack preflight (algo-2, ml.p4d.24xlarge)\n")
    assert err.startswith("TRAINSTACK PREFLIGHT FAILED: 4 GPUs are visible")
    assert failure.read_text() == err


def test_main_writes_exports_as_shell_lines_and_passes(tmp_path, capsys):
    host, _ = make_host(tmp_path / "root")
    exports = tmp_path / "exports.sh"
    failure = tmp_path / "failure"
    nccl_conf = tmp_path / "nccl.conf"
    nccl_conf.write_text("NCCL_DEBUG=INFO\n")
    arguments = ["--failure-file", str(failure), "--exports-file", str(exports)]
    arguments += ["--nccl-conf", str(nccl_conf)]
    assert preflight.main(arguments, host) == 0
    assert exports.read_text() == "export FI_PROVIDER=efa\nexport NCCL_NET='AWS Libfabric'\n"
    # NCCL reads this file in every process on the host, also in ranks that mpirun starts over ssh.
    assert nccl_conf.read_text() == "NCCL_DEBUG=INFO\nNCCL_NET=AWS Libfabric\n"
    assert not failure.exists()
    assert "trainstack preflight passed in" in capsys.readouterr().out


def test_run_command_turns_missing_programs_and_hangs_into_failed_results():
    assert preflight.run_command(["trainstack-no-such-program"], 5).returncode == 127
    hung = preflight.run_command([sys.executable, "-c", "import time; time.sleep(30)"], 0.5)
    assert hung.returncode == 124 and "no answer within" in hung.output


WRAPPER = Path(__file__).resolve().parents[2] / "container" / "train"
FAKE_PYTHON = """#!/usr/bin/env bash
# Stands in for the image's python3: the preflight (by its path) and the toolkit (by module).
if [[ "$1" == /opt/trainstack/preflight.py ]]; then
    echo "preflight ran" >> "$LOG"
    [[ "$PREFLIGHT_RESULT" == pass ]] || exit 1
    printf 'export NCCL_NET=%q\\n' 'AWS Libfabric' > "$3"
    exit 0
fi
echo "toolkit $* NCCL_NET=${NCCL_NET:-unset}" >> "$LOG"
"""


@pytest.fixture
def fake_image(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON)
    (bin_dir / "python3").chmod(0o755)

    def run(**env: str) -> tuple[int, str]:
        log = tmp_path / "log"
        log.write_text("")
        full_env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "LOG": str(log), **env}
        code = subprocess.run(["bash", str(WRAPPER), "train"], env=full_env, check=False).returncode
        return code, log.read_text()

    return run


def test_wrapper_runs_the_preflight_then_the_toolkit_with_its_exports(fake_image):
    code, log = fake_image(PREFLIGHT_RESULT="pass")
    assert code == 0
    assert log == "preflight ran\ntoolkit -m sagemaker_training.cli.train train NCCL_NET=AWS Libfabric\n"


def test_wrapper_stops_before_the_toolkit_when_the_preflight_fails(fake_image):
    code, log = fake_image(PREFLIGHT_RESULT="fail")
    assert code == 1
    assert log == "preflight ran\n"


def test_wrapper_skips_the_preflight_when_asked(fake_image):
    code, log = fake_image(PREFLIGHT_RESULT="fail", TRAINSTACK_SKIP_PREFLIGHT="1")
    assert code == 0
    assert log == "toolkit -m sagemaker_training.cli.train train NCCL_NET=unset\n"
