"""Planned interruptions in queue mode: the synthesized pipeline and its queued attempt in the emulator
against FakeBatch and FakeSageMaker, with training jobs that train.py ended because their training plan's
capacity block was ending (`trainstack-fault:infrastructure:plan-ending`, after a checkpoint:
stacks/pipeline/plan_endings.py). Batch does not retry such a failure (the queued attempt submits
without a retryStrategy), so the pipeline submits the next attempt at once on the next instance
preference, from the same checkpoint prefix; with no preference left the run ends CapacityExhausted."""

from __future__ import annotations

import json

import pytest

from localaws.sagemaker import STARTING, TRAINING
from tests.pipeline import harness
from tests.pipeline.test_fault_drills import SUCCESS
from tests.pipeline.test_plan_endings import PLAN_ENDING
from tests.pipeline.test_quota_drills import P4DE, P5
from tests.pipeline.test_scenarios import assigned
from tests.queue.conftest import service_job
from tests.queue.test_queue_pipeline import (  # noqa: F401 (fifo_pipeline: a fixture)
    fifo_pipeline,
    queue_for,
    submitted,
    submitted_preferences,
)


@pytest.fixture
def plan_queue(fifo_pipeline, monkeypatch):  # noqa: F811
    """The FIFO queue whose jobs follow `scripts`."""
    contexts = []

    def start(scripts):
        context, queue = queue_for(fifo_pipeline, monkeypatch, scripts)
        contexts.append(context)
        return queue

    yield start
    for context in contexts:
        context.__exit__(None, None, None)


def test_a_queued_run_whose_plan_ended_is_submitted_again_on_the_next_preference_at_once(plan_queue):
    queue = plan_queue([[STARTING, TRAINING, PLAN_ENDING], SUCCESS])
    outcome = harness.wait_for(queue.start("run", {"runName": "trainstack-qplan"}))
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert [call["jobName"] for call in submitted(queue)] == [
        service_job("trainstack-qplan-1"),
        service_job("trainstack-qplan-2"),
    ]
    assert submitted_preferences(queue) == [[P5, P4DE], [P4DE]]
    payloads = [json.loads(call["serviceRequestPayload"]) for call in submitted(queue)]
    assert {p["CheckpointConfig"]["S3Uri"] for p in payloads} == {
        "s3://trainstack-checkpoints-test/trainstack-qplan/"
    }
    assert outcome.output["retriedFaults"] == []
    assert outcome.output["instanceType"] == P4DE
    assert assigned(outcome, "ClassifyAttempt", "backoffSeconds") == []
    assert assigned(outcome, "ClassifyAttempt", "plansEnded") == [[P5]]


def test_a_queued_run_whose_plan_ended_with_no_preference_left_ends_capacity_exhausted(plan_queue):
    queue = plan_queue([[STARTING, PLAN_ENDING], [STARTING, PLAN_ENDING]])
    outcome = harness.wait_for(queue.start("run", {"runName": "trainstack-qplanend"}))
    assert (outcome.status, outcome.error) == ("FAILED", "CapacityExhausted")
    assert len(submitted(queue)) == 2
    started = queue.batch.training_jobs_of(service_job("trainstack-qplanend-2"))[-1]
    assert outcome.cause.startswith(
        f"The training plan of {P4DE} ended the instances of job {started} after its checkpoint, "
        "and the profile has no other instance preference; the checkpoints in "
        "s3://trainstack-checkpoints-test/trainstack-qplanend/ resume the run"
    ), outcome.cause
