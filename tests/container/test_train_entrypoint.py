"""container/train on SIGTERM: the stop reaches the launcher and the wrapper outlives its process group."""

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

WRAPPER = Path(__file__).resolve().parents[2] / "container" / "train"

# Stands in for the image's python3 running the SageMaker toolkit: it starts a launcher and waits for it,
# but dies at once on SIGTERM without passing it on, as the real toolkit does.
FAKE_TOOLKIT = """#!/usr/bin/env bash
[[ "$1 $2" == "-m sagemaker_training.cli.train" ]] || exit 99
echo $$ > "$WORK/toolkit.pid"
fake-torchrun &
wait $!
exit "$TOOLKIT_STATUS"
"""

# Stands in for torchrun: on SIGTERM its workers write a checkpoint (1 s here), then it exits 0.
FAKE_LAUNCHER = """#!/usr/bin/env bash
write_checkpoint() { sleep 1; echo written > "$WORK/checkpoint"; exit 0; }
trap write_checkpoint TERM
touch "$WORK/started"
sleep "$LAUNCHER_SECONDS" &
wait $!
"""


def _signals_as_a_container_starts() -> None:
    """No signal blocked or ignored, as the container runtime starts the entrypoint. The test worker may
    have inherited or set otherwise (a signal ignored or blocked at exec stays so, and bash cannot trap
    a signal ignored on entry)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_DFL)


@pytest.fixture
def start_wrapper(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in {"python3": FAKE_TOOLKIT, "fake-torchrun": FAKE_LAUNCHER}.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    started: list[subprocess.Popen] = []

    def start(toolkit_status: int = 0, launcher_seconds: float = 60) -> subprocess.Popen:
        env = {
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "WORK": str(tmp_path),
            "TRAINSTACK_SKIP_PREFLIGHT": "1",
            "TOOLKIT_STATUS": str(toolkit_status),
            "LAUNCHER_SECONDS": str(launcher_seconds),
        }
        proc = subprocess.Popen(
            ["bash", str(WRAPPER), "train"],
            env=env,
            start_new_session=True,
            preexec_fn=_signals_as_a_container_starts,
        )
        started.append(proc)
        return proc

    yield start
    # A failing test (e.g. against a wrapper that `exec`s the toolkit) must not leave the fakes running.
    for proc in started:
        proc.kill()
        proc.wait()
    pid_file = tmp_path / "toolkit.pid"
    if pid_file.exists():
        try:
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} did not appear within {timeout} s"
        time.sleep(0.05)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_stop_signal_reaches_the_launcher_and_the_wrapper_waits_for_its_checkpoint(
    start_wrapper, tmp_path, stop_signal
):
    proc = start_wrapper()
    wait_for(tmp_path / "started")
    proc.send_signal(stop_signal)
    code = proc.wait(timeout=60)
    # Checked the moment the wrapper exits: in a container, its exit ends every process left.
    assert (tmp_path / "checkpoint").exists(), "the wrapper exited before the launcher wrote its checkpoint"
    assert not group_alive(int((tmp_path / "toolkit.pid").read_text())), (
        "processes of the group outlived the wrapper"
    )
    assert code == 128 + signal.SIGTERM  # the toolkit's own status: it died of the forwarded SIGTERM


@pytest.mark.parametrize("toolkit_status", [0, 3])
def test_without_a_signal_the_wrapper_exits_with_the_toolkits_status(start_wrapper, tmp_path, toolkit_status):
    proc = start_wrapper(toolkit_status=toolkit_status, launcher_seconds=0.1)
    assert proc.wait(timeout=60) == toolkit_status
    assert (tmp_path / "started").exists()
    assert not (tmp_path / "checkpoint").exists()
