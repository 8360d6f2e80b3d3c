"""trainstack.quota over SageMaker's real ResourceLimitExceeded texts (quota_texts.yaml, each with its
source): in Python and as the JSONata the attempt machines run, on the message alone and as the Cause
Step Functions and AWS Batch wrap it in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from localaws.emulator import VirtualClock
from localaws.emulator.jsonata_engine import jsonata_evaluator
from trainstack.quota import describe, parse, quota_expression, quota_name

TEXTS = yaml.safe_load((Path(__file__).parent / "quota_texts.yaml").read_text())
# How the message reaches the machines: a direct attempt's Cause (aws-sdk integration: message plus
# the request's service, status and id), a queued attempt's statusReason (Batch's prefix for what
# SageMaker answered: Batch user guide, "Service job retry strategies in AWS Batch").
WRAPPINGS = {
    "message": "{}",
    "step-functions-cause": "{} (Service: SageMaker, Status Code: 400, Request ID: 0f6c2e0a-3b1d-4e7a-9d1c)",
    "batch-status-reason": "Received status from SageMaker:ResourceLimitExceeded: {}",
}


@pytest.mark.parametrize("text", TEXTS, ids=[t["source"].rsplit("/", 3)[-3] for t in TEXTS])
@pytest.mark.parametrize("wrapping", list(WRAPPINGS))
def test_python_and_jsonata_read_the_same_quota(text, wrapping):
    wrapped = WRAPPINGS[wrapping].format(text["message"])
    refusal = parse(wrapped)
    in_jsonata = jsonata_evaluator(VirtualClock())(quota_expression(json.dumps(wrapped)))
    expected = text["expected"]
    if expected is None:
        assert (refusal, in_jsonata) == (None, None)
        return
    assert refusal.__dict__ | {"busy": refusal.busy} == expected
    assert in_jsonata == {
        "name": expected["name"],
        "instanceType": expected["instance_type"],
        "limit": expected["limit"],
        "utilization": expected["utilization"],
        "delta": expected["delta"],
        "busy": expected["busy"],
    }


def test_no_message_reads_as_no_quota():
    assert parse(None) is None
    assert jsonata_evaluator(VirtualClock())(quota_expression("null")) is None


def test_the_corpus_has_busy_and_exceeded_and_unrecognised_texts_each_sourced():
    kinds = {None if t["expected"] is None else t["expected"]["busy"] for t in TEXTS}
    assert kinds == {True, False, None}
    assert all(t["source"].startswith("https://") and t["why"] for t in TEXTS)


def test_service_quotas_names_match_the_refusals_names():
    busy = parse(TEXTS[0]["message"])
    assert quota_name(busy.instance_type) == busy.name
    assert describe(busy) == (
        "quota 'ml.p3.8xlarge for training job usage' busy (3 of 2 instances in use, 1 requested)"
    )
    exceeded = parse(TEXTS[1]["message"])
    assert describe(exceeded) == (
        "quota 'ml.p3.2xlarge for training job usage' of 0 instances is below the 1 requested"
    )
