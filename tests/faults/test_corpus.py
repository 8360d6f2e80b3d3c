"""The fault table against real failure texts (failure_texts.yaml, issue 29): every text is classified by
trainstack.faults in Python and by the JSONata the attempt machines run (through the emulator's evaluator,
jsonata 2.0.6), and both give its true class. train.py's own classifier is tested on the same texts in
tests/training/test_fault_token.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localaws.emulator import VirtualClock
from localaws.emulator.jsonata_engine import jsonata_evaluator
from tests.faults.corpus import CLASSES, load
from trainstack.faults import CAPACITY, FAULT_PATTERNS, capacity_expression, classify, fault_expression

ENTRIES = load()
REACHES = ("failure-reason", "toolkit-error", "script-output", "log-line")


@pytest.fixture(scope="module")
def in_jsonata() -> dict[str, dict]:
    """Each entry's FailureReason as the attempt machines see it: the fault they classify (Failed outcome)
    and whether CheckJob reports it as capacity. One evaluation for the whole corpus."""
    reasons = json.dumps([entry.failure_reason for entry in ENTRIES])
    body = f'{{"fault": {fault_expression("$reason")}, "capacity": {capacity_expression("$reason")}}}'
    results = jsonata_evaluator(VirtualClock())(f"$map({reasons}, function($reason) {{ {body} }})")
    return {entry.id: result for entry, result in zip(ENTRIES, results, strict=True)}


def test_the_corpus_holds_at_least_60_sourced_texts_with_one_reasoned_class_each():
    assert len(ENTRIES) >= 60
    assert len({entry.id for entry in ENTRIES}) == len(ENTRIES)
    for entry in ENTRIES:
        assert entry.text.strip() and entry.reaches in REACHES, entry.id
        assert entry.source.startswith("https://") or ".py" in entry.source or ".cc" in entry.source, entry
        assert entry.fault_class in CLASSES and "\n" not in entry.why and entry.why.strip(), entry.id
        if entry.debatable:
            assert entry.wrong in CLASSES and entry.wrong != entry.fault_class, entry.id
        else:
            assert entry.wrong is None, entry.id


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda entry: entry.id)
def test_the_table_gives_each_real_text_its_true_class(entry, in_jsonata):
    fault = classify(entry.failure_reason)
    assert entry.accepts(fault.fault_class, fault.kind), (entry.why, fault)
    assert in_jsonata[entry.id]["fault"] == fault.as_dict()  # the state machines decide alike
    assert in_jsonata[entry.id]["capacity"] is (fault.fault_class == CAPACITY)


def test_every_row_of_the_table_is_exercised_by_a_real_text():
    given = {
        (classify(entry.failure_reason).fault_class, classify(entry.failure_reason).kind) for entry in ENTRIES
    }
    assert [row for row in FAULT_PATTERNS if (row.fault_class, row.kind) not in given] == []


def test_docs_faults_lists_the_corpus_class_counts():
    page = (Path(__file__).parents[2] / "docs" / "faults.md").read_text()
    counts = ", ".join(f"{sum(e.fault_class == c for e in ENTRIES)} {c}" for c in CLASSES)
    assert f"{len(ENTRIES)} texts: {counts}" in page
