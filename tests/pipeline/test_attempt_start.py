"""Step Functions refusing to start the attempt child (too many open executions): the pipeline retries
the start, and a refusal that outlasts the retries ends the run with AWS's error, no job made."""

from __future__ import annotations

import json

import pytest

from localaws.sagemaker import COMPLETED, STARTING, TRAINING
from stacks.pipeline.attempt.attempt_start import START_REFUSED_ERRORS
from tests.pipeline import harness

REFUSED = "StepFunctions.ExecutionLimitExceeded"
# AWS's developer guide names the refusal REFUSED; LocalStack's snapshots, recorded against AWS, name it
# with the Exception suffix. The emulator names it StepFunctions.<Code>: the code chooses the name.
REFUSAL_NAMES = (REFUSED, "StepFunctions.ExecutionLimitExceededException")


def start_retry(pipeline) -> dict:
    (retry,) = pipeline.raw_training_definition["States"]["RunAttempt"]["Retry"]
    return retry


def refusals_in(outcome: harness.Outcome) -> list[str]:
    return [
        event["taskFailedEventDetails"]["error"]
        for event in outcome.events("TaskFailed")
        if event["taskFailedEventDetails"]["resource"] == "startExecution.sync:2"
    ]


def child_names(outcome: harness.Outcome) -> list[str]:
    """The execution name each StartExecution call of RunAttempt asked for."""
    return [
        json.loads(event["taskScheduledEventDetails"]["parameters"])["Name"]
        for event in outcome.events("TaskScheduled")
        if event["taskScheduledEventDetails"]["resource"] == "startExecution.sync:2"
    ]


def test_the_start_retry_matches_both_names_of_the_refusal(pipeline):
    assert START_REFUSED_ERRORS == REFUSAL_NAMES
    assert start_retry(pipeline)["ErrorEquals"] == list(REFUSAL_NAMES)


@pytest.mark.parametrize("refused", REFUSAL_NAMES)
def test_a_refused_start_is_retried_and_the_run_trains_one_job(interpreter, pipeline, monkeypatch, refused):
    sm = interpreter(job_scripts=[[STARTING, TRAINING, COMPLETED]])
    refusals = harness.refuse_start_executions(monkeypatch, sm.attempt_arn, times=2)
    refusals.error = (refused.removeprefix("StepFunctions."), harness.EXECUTION_LIMIT_EXCEEDED[1])
    outcome = sm.run({"runName": "trainstack-refused"})
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert (outcome.output["attempts"], outcome.output["trainingJobName"]) == (1, "trainstack-refused-1")
    assert list(sm.fake.jobs) == ["trainstack-refused-1"]
    assert len(sm.attempts()) == 1
    # The pipeline's history shows the two refusals under AWS's name, then the start that went through.
    assert refusals.refused == 2
    assert refusals_in(outcome) == [refused, refused]
    names = child_names(outcome)
    assert len(names) == 3 and len(set(names)) == 3  # each try evaluates $uuid() again
    assert all(name.startswith("attempt-1-") for name in names)
    # Waited on the virtual clock with full jitter: at most 5 s, then at most 10 s.
    retry = start_retry(pipeline)
    assert (retry["IntervalSeconds"], retry["BackoffRate"], retry["JitterStrategy"]) == (5, 2, "FULL")
    assert len(sm.clock.retry_sleeps) == 2
    assert all(0 <= slept <= cap for slept, cap in zip(sm.clock.retry_sleeps, (5, 10), strict=True))


def test_a_refusal_outlasting_the_retries_ends_the_run_with_awss_error_and_no_job(
    interpreter, pipeline, monkeypatch
):
    sm = interpreter()
    refusals = harness.refuse_start_executions(monkeypatch, sm.attempt_arn, times=100)
    outcome = sm.run({"runName": "trainstack-no-slot"})
    retry = start_retry(pipeline)
    assert (outcome.status, outcome.error) == ("FAILED", REFUSED)
    # The Cause carries Step Functions' message (the emulator's SDK-style details follow it).
    assert outcome.cause.startswith(harness.EXECUTION_LIMIT_EXCEEDED[1])
    assert refusals.refused == 1 + retry["MaxAttempts"]
    assert refusals_in(outcome) == [REFUSED] * (1 + retry["MaxAttempts"])
    assert (sm.fake.create_calls, sm.attempts()) == (0, [])
    caps = [
        min(retry["IntervalSeconds"] * retry["BackoffRate"] ** n, retry["MaxDelaySeconds"])
        for n in range(retry["MaxAttempts"])
    ]
    assert caps == [5, 10, 20, 40, 80, 120]
    assert all(0 <= slept <= cap for slept, cap in zip(sm.clock.retry_sleeps, caps, strict=True))
