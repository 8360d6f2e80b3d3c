"""The cost cap (max_cost_usd) in the synthesized machines, on the virtual clock: a run planned above the
cap never starts, a run billed past it is stopped with BudgetExceeded and leaves no job running, spend of
ended attempts counts, and a run under the cap is not touched. The default config caps llama-1b-smddp
at $300 (it plans $89); runs here take 63 instances and few steps so that the cap is crossed within
minutes of billing."""

from __future__ import annotations

import re

import pytest

from localaws.sagemaker import BILLED_TRAINING, COMPLETED, STARTING
from tests.pipeline.test_fault_drills import NCCL
from trainstack.cost_cap import planned_cost_usd, usd
from trainstack.execution_input import InvalidInputError, validate_execution_input
from trainstack.prices import offline_training_prices

PROFILE = "llama-1b-smddp"
WIDE = {"profile": PROFILE, "instanceCount": 63, "hyperparameters": {"max_steps": "100"}}
# 63 x ml.p4d.24xlarge (the first preference, which the fake selects): ~$1,591 an hour.
PRICES = offline_training_prices("us-east-1")  # the config's region
HOURLY = 63 * PRICES.hourly_usd("ml.p4d.24xlarge")


def _on_virtual_time(sm):
    """The fake's TrainingStartTime/EndTime on the interpreter's clock."""
    sm.fake.now = sm.clock.time
    return sm


def _dollars(text: str) -> list[float]:
    return [float(value.replace(",", "")) for value in re.findall(r"\$([0-9,]+\.[0-9]{2})", text)]


def test_a_run_planned_above_the_cap_is_refused_before_any_job(interpreter, pipeline):
    execution_input = {
        "profile": PROFILE,
        "runName": "trainstack-dear",
        "hyperparameters": {"max_steps": "40000"},
    }
    planned = planned_cost_usd(
        pipeline.settings.profile(PROFILE), execution_input["hyperparameters"], None, PRICES
    )
    sm = interpreter()
    outcome = sm.run(execution_input)
    assert (outcome.status, outcome.error) == ("FAILED", "InvalidInput")
    assert outcome.cause == (
        f"The run's planned cost of {usd(planned)} exceeds the max_cost_usd of $300.00 of profile {PROFILE}; "
        "lower max_steps or instanceCount, or raise max_cost_usd."
    )
    assert planned > 300 and sm.fake.create_calls == 0
    with pytest.raises(InvalidInputError) as refused:
        validate_execution_input(execution_input, pipeline.settings, "exec-1")
    assert str(refused.value) == outcome.cause


def test_a_run_billed_past_the_cap_is_stopped_with_budget_exceeded(interpreter):
    sm = _on_virtual_time(interpreter(job_scripts=[[STARTING, BILLED_TRAINING]]))
    outcome = sm.run({**WIDE, "runName": "trainstack-spend"})
    assert (outcome.status, outcome.error) == ("FAILED", "BudgetExceeded"), outcome.cause
    job = sm.fake.jobs["trainstack-spend-1"]
    assert sm.fake.stop_requests == ["trainstack-spend-1"]
    assert job.current().status == "Stopped"  # no job left running
    billed, cap = _dollars(outcome.cause)[:2]
    billable_seconds = round(job.billed_until - job.billed_from)  # BillableTimeInSeconds
    assert (cap, billed) == (300.0, round(billable_seconds * HOURLY / 3600, 2))
    # Stopped at the first poll past the cap, billed until the next poll found it Stopped (60 s apart).
    assert 300 < billed <= 300 + HOURLY * 2 * 60 / 3600
    assert "resumeFrom set to it" in outcome.cause
    assert "s3://trainstack-checkpoints-test/trainstack-spend/" in outcome.cause


def test_the_spend_of_ended_attempts_counts_and_no_retry_starts_past_the_cap(interpreter):
    """An NCCL fault after 12 minutes of billing (~$317): the poll before it saw ~$290, under the cap, so
    the attempt did not stop the job; the fault budget would retry, the cap does not."""
    script = [STARTING] + [BILLED_TRAINING] * 12 + [NCCL]
    sm = _on_virtual_time(interpreter(job_scripts=[script]))
    outcome = sm.run({**WIDE, "runName": "trainstack-spent"})
    assert (outcome.status, outcome.error) == ("FAILED", "BudgetExceeded"), outcome.cause
    assert list(sm.fake.jobs) == ["trainstack-spent-1"]
    assert sm.fake.stop_requests == []
    job = sm.fake.jobs["trainstack-spent-1"]
    billed = round(round(job.billed_until - job.billed_from) * HOURLY / 3600, 2)
    assert billed > 300
    assert outcome.cause.startswith(
        f"The run's billed cost reached {usd(billed)}, the max_cost_usd of $300.00"
    )


def test_a_run_under_the_cap_is_not_touched(interpreter):
    sm = _on_virtual_time(interpreter(job_scripts=[[STARTING, BILLED_TRAINING, COMPLETED]]))
    outcome = sm.run({**WIDE, "runName": "trainstack-cheap"})
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert sm.fake.stop_requests == []


@pytest.mark.parametrize(
    ("billed_seconds", "wait"),
    [(None, 1800), (0, 1800), (14_000, round((150 - 14_000 * 37.688 / 3600) / 37.688 * 3600)), (15_000, 60)],
)
def test_a_late_poll_is_brought_forward_to_when_the_cost_reaches_the_cap(billed_seconds, wait):
    """An old job polled every 30 minutes: the wait ends when its cost reaches what is left ($150 at
    $37.688 an hour: 14,328 s), never sooner than a minute; a job not billing yet keeps its wait."""
    from localaws.emulator import VirtualClock
    from localaws.emulator.jsonata_engine import jsonata_evaluator
    from stacks.pipeline.cost_cap_states import poll_within_budget

    cap = {"maxUsd": 150, "remainingUsd": 150, "usdPerInstanceHour": {"ml.p4d.24xlarge": 37.688}}
    job = {"name": "j", "instanceType": "ml.p4d.24xlarge", "instanceCount": 1}
    if billed_seconds is not None:
        job["billedSeconds"] = billed_seconds
    states = {"context": {"Execution": {"Input": {"costCap": cap | {"fallbackUsdPerHour": 47.11}}}}}
    evaluate = jsonata_evaluator(VirtualClock())
    assert evaluate(poll_within_budget("1800"), {"states": states, "job": job}) == wait


def test_a_teams_own_code_has_no_plan_to_refuse_and_is_stopped_when_billed_past_the_cap(
    interpreter, pipeline
):
    """The plan models train.py: a run of the team's own code (trainstack.team_code) starts whatever its
    max_steps, and the billed cost stops it as it stops train.py."""
    code = {"digest": "c" * 64, "entry": "fit.py"}
    execution_input = {**WIDE, "runName": "trainstack-own", "hyperparameters": {"max_steps": "40000"}}
    validate_execution_input({**execution_input, "code": code}, pipeline.settings, "exec-1")  # no plan
    sm = _on_virtual_time(interpreter(job_scripts=[[STARTING, BILLED_TRAINING]]))
    outcome = sm.run({**execution_input, "code": code})
    assert (outcome.status, outcome.error) == ("FAILED", "BudgetExceeded"), outcome.cause
    assert sm.fake.stop_requests == ["trainstack-own-1"]
