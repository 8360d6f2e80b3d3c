"""How train.py tells the pipeline why it failed: the token line in SageMaker's failure file
(docs/training.md, "Failure reasons and exit codes")."""

from __future__ import annotations

import pytest
import torch
import train
from data import UserError
from faults import FAULT_PATTERN, FAULTS, HANG, NonFiniteError, classify, report


@pytest.fixture
def output_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SM_OUTPUT_DIR", str(tmp_path / "output"))
    return tmp_path / "output"


@pytest.mark.parametrize(
    ("error", "token", "sentence"),
    [
        (UserError("--seq-len must be above 0."), "trainstack-fault:user:config ValueError", "--seq-len"),
        (
            NonFiniteError("Training diverged: ..."),
            "trainstack-fault:user:nonfinite FloatingPointError",
            "div",
        ),
        (torch.OutOfMemoryError("CUDA out of memory."), "trainstack-fault:user:oom MemoryError", "of memory"),
        (
            torch.distributed.DistBackendError("NCCL error in: ..."),
            "trainstack-fault:infrastructure:nccl RuntimeError",
            "DistBackendError: NCCL error",
        ),
        (
            RuntimeError(
                "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [::1]:1"
            ),
            "trainstack-fault:infrastructure:network RuntimeError",
            "RuntimeError: [../third_party/gloo",
        ),
        (ZeroDivisionError("division by zero"), "trainstack-fault:user:exception Exception", "ZeroDivision"),
    ],
)
def test_each_failure_writes_its_token_and_sentence_to_the_failure_file(output_dir, error, token, sentence):
    line = report(*classify(error))
    written = (output_dir / "failure").read_text()
    assert written == line + "\n" and written.startswith(token + ": ") and sentence in written
    assert FAULT_PATTERN.search(f"AlgorithmError: {written}")


def test_the_first_failure_on_a_host_stays_the_reason(output_dir):
    first = report(HANG, "Rank 1 completed no optimizer step in 10 s.")
    report(*classify(RuntimeError("Connection closed by peer")))  # a peer losing its connection after it
    assert (output_dir / "failure").read_text() == first + "\n"
    assert [path.name for path in output_dir.iterdir()] == ["failure"]  # nothing left aside


def test_a_reason_is_one_line_and_every_token_matches_the_pattern(output_dir):
    line = report(HANG, "Rank 1 stopped.\nIts stack is in the log.")
    assert "\n" not in line
    assert [FAULT_PATTERN.search(fault.line("x")).groups() for fault in FAULTS] == [
        (fault.cause, fault.kind) for fault in FAULTS
    ]


def test_a_bad_flag_exits_2_with_the_config_token(output_dir, capsys):
    assert train.main(["--model-preset", "tiny", "--seq-len", "0"]) == 2
    reason = (output_dir / "failure").read_text()
    assert reason.startswith("trainstack-fault:user:config ValueError: Argument --seq-len: "), reason
    assert capsys.readouterr().out.strip().endswith(reason.strip())  # logged, once, as the error


def test_a_local_run_writes_no_failure_file(tmp_path, monkeypatch):
    monkeypatch.delenv("SM_OUTPUT_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    report(HANG, "Rank 0 stopped.")
    assert list(tmp_path.iterdir()) == []
