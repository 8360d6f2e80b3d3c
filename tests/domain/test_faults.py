"""trainstack.faults: the classification table, applied in Python and as the JSONata the attempt machines
run (through the emulator's evaluator, jsonata-python), over FailureReasons as SageMaker reports them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localaws.emulator import VirtualClock
from localaws.emulator.functions import jsonata_evaluator
from trainstack.faults import FAULT_PATTERNS, TOKEN_PATTERN, Fault, classify, describe, fault_expression


def toolkit_reason(exit_code: int, message: str) -> str:
    """sagemaker-training 5.1.4 errors.py _CalledProcessError.__str__, with SageMaker's prefix."""
    head = f"AlgorithmError: ExecuteUserScriptError:\nExitCode {exit_code}"
    return f'{head}\nErrorMessage "{message}"\nCommand "x"'


REASONS = [
    # train.py's failure file (docs/training.md): the token decides, whatever follows it.
    (
        "AlgorithmError: trainstack-fault:infrastructure:hang TimeoutError: Rank 1 ...",
        ("infrastructure", "hang"),
    ),
    (
        "AlgorithmError: trainstack-fault:infrastructure:collective RuntimeError: DistBackendError: NCCL",
        (
            "infrastructure",
            "collective",
        ),
    ),
    (
        "AlgorithmError: trainstack-fault:user:nonfinite FloatingPointError: loss is nan",
        ("user", "nonfinite"),
    ),
    ("AlgorithmError: trainstack-fault:user:config ValueError: --seq-len must be ...", ("user", "config")),
    # The toolkit's text with the token inside: the first token is the cause, the rest consequences.
    (
        toolkit_reason(
            1, "trainstack-fault:user:oom MemoryError: x [rank1] trainstack-fault:infrastructure:collective"
        ),
        ("user", "oom"),
    ),
    (
        "InternalServerError: We encountered an internal error. Please try again.",
        ("infrastructure", "sagemaker-internal"),
    ),
    (toolkit_reason(75, "TimeoutError: no step"), ("infrastructure", "hang")),
    (toolkit_reason(2, "usage: train.py [-h]"), ("user", "config")),
    (
        toolkit_reason(1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
        ("user", "oom"),
    ),
    (
        'AlgorithmError: ExecuteUserScriptError:\nExitCode 137\nErrorMessage ""\n'
        'ExtraInfo "OutOfMemory: Process killed by SIGKILL (signal 9)"\nCommand "x"',
        ("user", "oom"),
    ),
    # An OOM on one rank makes the others lose their peers: the OOM is the cause.
    (
        toolkit_reason(1, "CUDA out of memory. ... remote process exited or there was a network error"),
        ("user", "oom"),
    ),
    (
        toolkit_reason(
            1, "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE)"
        ),
        (
            "infrastructure",
            "collective-timeout",
        ),
    ),
    (
        toolkit_reason(
            1, "DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error"
        ),
        (
            "infrastructure",
            "nccl",
        ),
    ),
    (
        toolkit_reason(1, "NCCL error in: x.cpp:1, internal error - please report this issue"),
        ("infrastructure", "nccl"),
    ),
    (
        toolkit_reason(1, "torch.distributed.DistNetworkError: Connection reset by peer"),
        ("infrastructure", "network"),
    ),
    (
        "AlgorithmError: Training failed due to hardware failure after cluster repair",
        ("infrastructure", "hardware"),
    ),
    (
        toolkit_reason(1, "RuntimeError: CUDA error: uncorrectable ECC error encountered"),
        ("infrastructure", "hardware"),
    ),
    # A script exception without an infrastructure sign is the user's (NCCL's "invalid usage" included).
    (toolkit_reason(1, "KeyError: 'input_ids'"), ("user", "script")),
    (
        toolkit_reason(1, "NCCL error in: x.cpp:1, invalid usage (run with NCCL_DEBUG=WARN for details)"),
        ("user", "script"),
    ),
    ('AlgorithmError: ImportModuleError:\nExitCode 1\nErrorMessage "No module named x"', ("user", "script")),
    ("AlgorithmError: Framework Error: \nTraceback (most recent call last): ...", ("unknown", "unknown")),
    (None, ("unknown", "unknown")),
    ("", ("unknown", "unknown")),
]


@pytest.mark.parametrize(("reason", "expected"), REASONS)
def test_python_and_the_state_machines_jsonata_classify_alike(reason, expected):
    evaluate = jsonata_evaluator(VirtualClock())
    in_jsonata = evaluate(fault_expression(json.dumps(reason)))
    assert (classify(reason).fault_class, classify(reason).kind) == expected
    assert (in_jsonata["class"], in_jsonata["kind"]) == expected


def test_every_row_of_the_table_is_exercised_and_sourced():
    kinds = {expected for _, expected in REASONS}
    for row in FAULT_PATTERNS:
        assert (row.fault_class, row.kind) in kinds, row
        assert len(row.source) > 40, row


def test_describe_names_the_class_and_kind():
    assert describe(Fault("user", "oom")) == "user error (oom)"
    assert describe({"class": "infrastructure", "kind": "nccl"}) == "infrastructure fault (nccl)"


def test_docs_faults_lists_every_row_of_the_table():
    page = (Path(__file__).parents[2] / "docs" / "faults.md").read_text()
    def cell(pattern: str) -> str:  # a Markdown table cell escapes |
        return "`" + pattern.replace("|", "\\|") + "`"

    assert cell(TOKEN_PATTERN) in page
    for row in FAULT_PATTERNS:
        assert f"| {row.fault_class} | {row.kind} | {cell(row.pattern)} |" in page, row
