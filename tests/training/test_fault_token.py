"""train.py and the pipeline read failures with the same table (training_scripts/fault_table.py): the token
train.py writes is classified as it says, and the exception that ended a run is classified as the
pipeline classifies the same text in a FailureReason (the real texts of tests/faults/failure_texts.yaml)."""

from __future__ import annotations

import builtins
import importlib

import pytest
from faults import FAULT_PATTERN, FAULTS, classify, report

from tests.faults.corpus import load
from trainstack.faults import TOKEN_PATTERN
from trainstack.faults import classify as classify_reason

RAISED = [entry for entry in load() if entry.exception]


def raised(entry) -> BaseException:
    """The exception the entry's text prints: its class, with the text after `<class>: ` as message."""
    module, _, name = entry.exception.rpartition(".")
    error_class = getattr(importlib.import_module(module) if module else builtins, name)
    prefix = next(p for p in (entry.exception, name) if entry.text.startswith(f"{p}: "))
    return error_class(entry.text[len(prefix) + 2 :])


def test_every_fault_train_py_reports_is_classified_as_its_token_says():
    assert TOKEN_PATTERN == FAULT_PATTERN.pattern
    for fault in FAULTS:
        reason = "AlgorithmError: " + fault.line("Rank 1 did something.")  # as SageMaker reports it
        found = classify_reason(reason)
        assert (found.fault_class, found.kind) == (fault.cause, fault.kind)


@pytest.mark.parametrize("entry", RAISED, ids=lambda entry: entry.id)
def test_train_py_classifies_a_real_exception_as_the_pipeline_classifies_its_text(entry, monkeypatch):
    monkeypatch.delenv("SM_OUTPUT_DIR", raising=False)
    fault, _ = classify(raised(entry))
    # A script exception no row names is train.py's user:exception, the toolkit wrapper's user:script.
    assert entry.accepts(fault.cause, "script" if fault.kind == "exception" else fault.kind), fault
    line = report(fault, "Rank 0 stopped.", echo=False)  # the line train.py writes, as the pipeline reads it
    assert classify_reason(f"AlgorithmError: {line}").as_dict() == {"class": fault.cause, "kind": fault.kind}
