"""Quota refusals on the virtual clock, direct mode: the synthesized pipeline in the emulator against
the scripted SageMaker answering CreateTrainingJob with ResourceLimitExceeded (stacks/pipeline/
quota_waits.py). Queue mode's drills: tests/queue/test_queue_quota.py."""

from __future__ import annotations

import boto3

from localaws.sagemaker import CAPACITY_FAILURE, COMPLETED, STARTING, TRAINING, evaluated
from stacks.pipeline.attempt_metrics import ATTEMPTS, OUTCOME_DIMENSION, QUOTA_DIMENSION, QUOTA_WAITS
from tests.pipeline import harness
from tests.pipeline.test_fault_surfacing import status_of
from tests.pipeline.test_monitoring import statistics
from trainstack.report.collect import collect
from trainstack.report.render import attempt_table
from trainstack.runs import latest_execution

SUCCESS = [STARTING, TRAINING, COMPLETED]
# The attempt machine's waits before its three DescribeTrainingJob calls of a SUCCESS job.
POLLS = [60, 60, 60]
P5, P4DE = "ml.p5.48xlarge", "ml.p4de.24xlarge"


def refusal(quota: str, limit: int, utilization: int, delta: int) -> tuple[str, str]:
    """SageMaker's code and message for a quota refusal: the wording of aws/amazon-sagemaker-examples#1543
    (tests/faults/quota_texts.yaml) with this quota and these numbers."""
    return (
        "ResourceLimitExceeded",
        f"The account-level service limit '{quota}' is {limit} Instances, with current utilization of "
        f"{utilization} Instances and a request delta of {delta} Instances. Please contact AWS support to "
        "request an increase for this limit.",
    )


def busy(instance_type: str, kind: str = "training") -> tuple[str, str]:
    return refusal(f"{instance_type} for {kind} job usage", 4, 4, 2)


def exceeded(instance_type: str) -> tuple[str, str]:
    return refusal(f"{instance_type} for training job usage", 1, 0, 2)


def preferences(request: dict) -> list[str]:
    return [p["InstanceType"] for p in request["ResourceConfig"]["InstancePreferences"]]


def test_quota_busy_then_free_waits_like_capacity_and_succeeds(interpreter):
    sm = interpreter(
        job_scripts=[SUCCESS],
        evaluation_script=evaluated(2.0),
        create_errors=[busy("ml.g5.12xlarge", "spot training")],
    )
    outcome = sm.run({"profile": "small-torchrun", "runName": "trainstack-busy"})
    assert outcome.status == "SUCCEEDED", outcome.cause
    # Attempt 1's create made no job; attempt 2 trained, and its model was evaluated (small-torchrun has a
    # registry: block, docs/registry.md).
    assert list(sm.fake.jobs) == ["trainstack-busy-2", "trainstack-busy-eval"]
    assert outcome.output["modelPackage"]["status"] == "Registered"
    assert outcome.output["quotaWaits"] == [
        {
            "attempt": 1,
            "quota": "ml.g5.12xlarge for spot training job usage",
            "instanceType": "ml.g5.12xlarge",
            "limit": 4,
            "utilization": 4,
            "delta": 2,
        }
    ]
    assert 60 <= sm.clock.waits[0] <= 66  # the profile's capacity back-off before attempt 2


def test_a_request_above_every_preferences_limit_fails_fast_naming_the_quotas(interpreter):
    sm = interpreter(create_errors=[exceeded(P5), exceeded(P4DE)])
    outcome = sm.run({"runName": "trainstack-over"})
    assert (outcome.status, outcome.error) == ("FAILED", "QuotaExceeded")
    assert outcome.cause.startswith(
        "SageMaker refused job trainstack-over-2: the 2 instances requested exceed quota "
        "'ml.p4de.24xlarge for training job usage' of 1 instances; request a higher quota in Service Quotas"
    )
    assert outcome.cause.endswith(
        "The other instance preferences are over their quotas too: ml.p5.48xlarge for training job usage."
    )
    assert (sm.fake.create_calls, len(sm.fake.jobs), sm.clock.waits) == (2, 0, [])


def test_busy_forever_ends_with_capacity_exhausted_within_the_profiles_attempts(interpreter):
    """nccl-test allows 3 attempts: p5 busy (hop), p4de busy (back off), p5 busy (hop), p4de busy: done."""
    sm = interpreter(create_errors=[busy(P5), busy(P4DE)] * 2)
    outcome = sm.run({"profile": "nccl-test", "runName": "trainstack-forever"})
    assert (outcome.status, outcome.error) == ("FAILED", "CapacityExhausted")
    assert outcome.cause.startswith("No capacity after 4 attempts (profile nccl-test allows 3); last job")
    assert "quota 'ml.p4de.24xlarge for training job usage' is busy: 4 of its 4 instances" in outcome.cause
    assert (sm.fake.create_calls, len(sm.fake.jobs), len(sm.clock.waits)) == (4, 0, 1)


def test_an_exceeded_preference_stays_out_after_a_busy_ones_back_off(interpreter):
    sm = interpreter(job_scripts=[SUCCESS], create_errors=[exceeded(P5), busy(P4DE)])
    outcome = sm.run({"runName": "trainstack-mixed"})
    assert outcome.status == "SUCCEEDED", outcome.cause
    (job,) = sm.fake.jobs.values()
    assert (preferences(job.request), outcome.output["instanceType"]) == ([P4DE], P4DE)
    assert [w["instanceType"] for w in outcome.output["quotaWaits"]] == [P4DE]
    backoff, *polls = sm.clock.waits
    assert (120 <= backoff <= 132, polls) == (True, POLLS)  # capacity back-off before attempt 3


def test_busy_on_the_first_preference_uses_the_second_at_once_and_shows_the_wait(interpreter, capsys):
    sm = interpreter(job_scripts=[SUCCESS], create_errors=[busy(P5)])
    outcome = sm.run({"runName": "trainstack-qshown"}, name="trainstack-qshown")
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert (outcome.output["instanceType"], outcome.output["attempts"]) == (P4DE, 2)
    assert [w["instanceType"] for w in outcome.output["quotaWaits"]] == [P5]
    (job,) = sm.fake.jobs.values()
    assert preferences(job.request) == [P4DE]
    assert sm.clock.waits == POLLS  # no back-off
    assert statistics(QUOTA_WAITS, {QUOTA_DIMENSION: f"{P5} for training job usage"})["Sum"] == 1
    assert statistics(ATTEMPTS, {OUTCOME_DIMENSION: "Quota"})["Sum"] == 1
    out = status_of(sm, "trainstack-qshown", capsys)
    assert (
        "quota waits: 1 (other jobs held the quota; waited like for capacity)\n  attempt 1: quota "
        "'ml.p5.48xlarge for training job usage' busy (4 of 4 instances in use, 2 requested)"
    ) in out
    stepfunctions = boto3.client("stepfunctions", region_name=harness.REGION)
    report = collect(
        stepfunctions,
        boto3.client("sagemaker", region_name=harness.REGION),
        boto3.client("logs", region_name=harness.REGION),
        latest_execution(stepfunctions, sm.pipeline_arn, "trainstack-qshown"),
        "trainstack",
    )
    assert (
        "<td>quota &#x27;ml.p5.48xlarge for training job usage&#x27; busy (4 of 4 instances in use, "
        "2 requested)</td>"
    ) in attempt_table(report.attempts)


def test_a_busy_preference_is_asked_for_again_after_a_capacity_back_off(interpreter):
    sm = interpreter(job_scripts=[[STARTING, CAPACITY_FAILURE], SUCCESS], create_errors=[busy(P5)])
    outcome = sm.run({"runName": "trainstack-again"})
    assert outcome.status == "SUCCEEDED", outcome.cause
    first, second = (job.request for job in sm.fake.jobs.values())
    assert (preferences(first), preferences(second)) == ([P4DE], [P5, P4DE])
    assert outcome.output["instanceType"] == P5
