"""The pipeline reads the token train.py writes: trainstack.faults (the classification table) and
training_scripts/faults.py (the writer) agree on its pattern and on every fault's class and kind."""

from __future__ import annotations

from faults import FAULT_PATTERN, FAULTS

from trainstack.faults import TOKEN_PATTERN, classify


def test_every_fault_train_py_reports_is_classified_as_its_token_says():
    assert TOKEN_PATTERN == FAULT_PATTERN.pattern
    for fault in FAULTS:
        reason = "AlgorithmError: " + fault.line("Rank 1 did something.")  # as SageMaker reports it
        found = classify(reason)
        assert (found.fault_class, found.kind) == (fault.cause, fault.kind)
