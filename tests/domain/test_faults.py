"""trainstack.faults beyond the table's rows (those are tested on real texts in tests/faults): train.py's
token decides over the table, in Python and in the JSONata the attempt machines run (through the emulator's
evaluator, jsonata 2.0.6); a missing reason is unknown; docs/faults.md lists every row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localaws.emulator import VirtualClock
from localaws.emulator.jsonata_engine import jsonata_evaluator
from trainstack.faults import FAULT_PATTERNS, TOKEN_PATTERN, Fault, classify, describe, fault_expression

REASONS = [
    # train.py's failure file (docs/training.md): the token decides, whatever follows it.
    (
        "AlgorithmError: trainstack-fault:infrastructure:hang TimeoutError: Rank 1 ...",
        ("infrastructure", "hang"),
    ),
    (
        "AlgorithmError: trainstack-fault:user:nonfinite FloatingPointError: loss is nan",
        ("user", "nonfinite"),
    ),
    # A kind with a hyphen (the slow-host check's).
    (
        "AlgorithmError: trainstack-fault:infrastructure:slow-host RuntimeError: Rank 3 ran 2.4 x the median",
        ("infrastructure", "slow-host"),
    ),
    # The token inside the toolkit's wrapper: the first token is the cause, the rest consequences, and it
    # wins over the table (an OOM reported as such even where a peer's NCCL error follows).
    (
        'AlgorithmError: ExecuteUserScriptError:\nExitCode 1\nErrorMessage "trainstack-fault:user:oom '
        "MemoryError: x [rank1] trainstack-fault:infrastructure:nccl RuntimeError: DistBackendError: NCCL "
        'error in: ..., remote process exited or there was a network error"\nCommand "x"',
        ("user", "oom"),
    ),
    (None, ("unknown", "unknown")),
    ("", ("unknown", "unknown")),
]


@pytest.mark.parametrize(("reason", "expected"), REASONS)
def test_python_and_the_state_machines_jsonata_classify_alike(reason, expected):
    evaluate = jsonata_evaluator(VirtualClock())
    in_jsonata = evaluate(fault_expression(json.dumps(reason)))
    assert (classify(reason).fault_class, classify(reason).kind) == expected
    assert (in_jsonata["class"], in_jsonata["kind"]) == expected


def test_every_row_of_the_table_is_sourced():
    for row in FAULT_PATTERNS:
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
