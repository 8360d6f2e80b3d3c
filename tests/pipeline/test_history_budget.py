"""Step Functions keeps at most 25,000 history events per execution: prove every profile stays under 20,000,
in the pipeline, its attempts and the registration machine with its evaluation jobs.

The events one poll, one attempt, one throttled create and the rest of an execution add are counted
from real executions of the synthesized definitions (the pipeline and its attempt machine); the worst
case is then computed for each profile at its longest allowed runtime (28 days, or max_wait_hours on
spot) with every attempt used and every create throttled as long as the attempt machine allows.
"""

from __future__ import annotations

import json

import pytest

from localaws.sagemaker import CAPACITY_FAILURE, COMPLETED, STARTING, TRAINING, evaluated
from stacks.pipeline.attempt.training_attempt import CREATE_THROTTLE_LOOPS
from stacks.pipeline.state_machine_facts import (
    HISTORY_EVENT_BUDGET,
    worst_case_history,
    worst_case_registration_history,
)
from tests.pipeline import harness
from tests.pipeline.test_fault_drills import NCCL
from trainstack.retry_policies import MAX_ATTEMPTS_LIMIT, MAX_FAULT_RETRIES, FaultRetryPolicy, RetryPolicy

# AWS records a TaskSubmitted event for a .sync child execution, which the local interpreter omits.
EVENTS_NOT_EMULATED_PER_ATTEMPT = 1


def run(sm, script, name, **fake) -> tuple[int, list[int]]:
    """Events of the pipeline execution and of each of its attempts."""
    sm.fake.behaviour.script(script)
    for key, value in fake.items():
        setattr(sm.fake, key, value)
    before = {attempt.execution_arn for attempt in sm.attempts()}
    outcome = sm.run({"profile": "nccl-test", "runName": f"trainstack-{name}"}, name=name)
    assert outcome.status == "SUCCEEDED", outcome.cause
    attempts = [len(attempt.history) for attempt in sm.attempts() if attempt.execution_arn not in before]
    return len(outcome.history), attempts


@pytest.mark.filterwarnings("ignore:Exception\\(ServiceError\\) with code ThrottlingException")
def test_worst_case_history_stays_under_the_budget_for_every_profile(interpreter, pipeline):
    sm = interpreter()
    few_polls = [STARTING, TRAINING, COMPLETED]
    pipeline_one, (attempt_few,) = run(sm, [few_polls], "few")
    _, (attempt_more,) = run(sm, [[STARTING] + [TRAINING] * 11 + [COMPLETED]], "more")
    pipeline_three, _ = run(sm, [[CAPACITY_FAILURE], [CAPACITY_FAILURE], few_polls], "three")
    # 3 throttled calls: the first and its two quick retries fail, the loop's first call passes.
    _, (attempt_throttled,) = run(sm, [few_polls], "throttled", throttles={"CreateTrainingJob": 3})

    per_poll = (attempt_more - attempt_few) / 10
    per_attempt = (pipeline_three - pipeline_one) / 2
    per_throttle_loop = attempt_throttled - attempt_few
    assert per_poll == int(per_poll) and per_attempt == int(per_attempt)
    pipeline_fixed = pipeline_one - per_attempt
    attempt_fixed = attempt_few - 3 * per_poll + CREATE_THROTTLE_LOOPS * per_throttle_loop
    costs = {
        "per_poll": int(per_poll),
        "per_attempt": int(per_attempt) + EVENTS_NOT_EMULATED_PER_ATTEMPT,
        "pipeline_fixed": int(pipeline_fixed),
        "attempt_fixed": int(attempt_fixed),
    }
    worst = {profile.name: worst_case_history(profile, **costs) for profile in pipeline.settings.profiles}
    print("measured:", json.dumps({**costs, "per_throttle_loop": per_throttle_loop, "worst_case": worst}))
    assert max(max(events.values()) for events in worst.values()) < HISTORY_EVENT_BUDGET
    # Any profile the config accepts: the most attempts and fault retries, the longest runtime and deadline.
    longest = pipeline.settings.profiles[0].model_copy(
        update={
            "retry": RetryPolicy(max_attempts=MAX_ATTEMPTS_LIMIT, deadline_hours=24 * 14),
            "fault_retries": FaultRetryPolicy(max_retries=MAX_FAULT_RETRIES),
        }
    )
    assert max(worst_case_history(longest, **costs).values()) < HISTORY_EVENT_BUDGET


@pytest.mark.filterwarnings("ignore:Exception\\(ServiceError\\) with code")
def test_the_registration_machine_stays_under_the_budget_for_every_profile(registry, pipeline):
    """The registration machine (and the attempt executions of its evaluation jobs) for every profile, as if
    each had a `registry:` block, and for any profile the config accepts (the most attempts and fault
    retries, the longest deadline and runtime): its events per evaluation job and per poll measured from
    real executions of the synthesized definitions. An evaluation job polled in the registration machine
    itself (per_poll > 0) puts its longest execution far past the limit."""
    run = registry()
    history = lambda: len(harness.executions(run.sm.registration_arn)[-1].history)  # noqa: E731
    first = run("trainstack-h1", 2.0, evaluated(2.0))
    assert first.status == "SUCCEEDED", first.cause
    # From here on a baseline exists: the longer path (DescribeModelPackage). The later versions are worse,
    # hence Rejected, so that each run reads the same one Approved version (the baseline lookup describes
    # every Approved version: docs/registry.md, "Limits").
    run("trainstack-h2", 2.0, evaluated(3.0))
    few = history()
    run("trainstack-h3", 2.0, [TRAINING] * 10 + evaluated(3.0))
    more = history()
    retried = run("trainstack-h4", 2.0, [TRAINING, CAPACITY_FAILURE], [TRAINING, NCCL], evaluated(3.0))
    assert retried.output["modelPackage"]["status"] == "Registered", retried.cause
    three = history()
    per_poll = (more - few) / 10
    per_job = (three - few) / 2
    assert per_poll == int(per_poll) and per_job == int(per_job)
    costs = {
        "per_poll": int(per_poll),
        "per_job": int(per_job) + EVENTS_NOT_EMULATED_PER_ATTEMPT,
        "registration_fixed": few - int(per_job),
    }
    longest = pipeline.settings.profiles[0].model_copy(
        update={
            "retry": RetryPolicy(max_attempts=MAX_ATTEMPTS_LIMIT, deadline_hours=24 * 14),
            "fault_retries": FaultRetryPolicy(max_retries=MAX_FAULT_RETRIES),
        }
    )
    worst = {
        profile.name: worst_case_registration_history(profile, **costs)
        for profile in pipeline.settings.profiles
    }
    worst["the longest accepted"] = worst_case_registration_history(longest, **costs)
    print("measured:", json.dumps({**costs, "worst_case": worst}))
    assert max(worst.values()) < HISTORY_EVENT_BUDGET
    # Each evaluation job's attempt execution: one job's polls, as a training attempt's (the test above).
    evaluation_attempts = [
        a for a in run.sm.attempts() if "-eval" in json.dumps(a.state_inputs("CheckRequest"))
    ]
    assert len(evaluation_attempts) == 6
