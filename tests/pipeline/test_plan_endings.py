"""Planned interruptions on the virtual clock: the synthesized pipeline in the emulator against jobs that
train.py ended because their training plan's capacity block was ending (training_scripts/capacity_block.py:
`trainstack-fault:infrastructure:plan-ending`, after a checkpoint). The run continues at once on the next
instance preference, from the same checkpoint prefix, with no fault retry counted; with no preference
left it ends CapacityExhausted naming the plan's end (stacks/pipeline/plan_endings.py)."""

from __future__ import annotations

from localaws.sagemaker import STARTING, TRAINING, Phase
from tests.pipeline.test_fault_drills import SUCCESS, one_checkpoint_prefix
from tests.pipeline.test_quota_drills import P4DE, P5, preferences
from tests.pipeline.test_scenarios import assigned

# A job that ran reports the type SageMaker chose (SelectedInstanceType).
PLAN_ENDING = Phase(
    "Failed",
    "Failed",
    "AlgorithmError: trainstack-fault:infrastructure:plan-ending TimeoutError: The training plan's capacity "
    "block ends this job's instances from 2026-12-04T09:30:00Z, so training stopped after the checkpoint "
    "of step 4000; the run continues from it on the next instance preference.",
    instances_selected=True,
)


def test_a_plan_ending_its_instances_continues_the_run_on_the_next_preference_at_once(interpreter):
    sm = interpreter(job_scripts=[[STARTING, TRAINING, PLAN_ENDING], SUCCESS])
    outcome = sm.run({"runName": "trainstack-plan"})
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert list(sm.fake.jobs) == ["trainstack-plan-1", "trainstack-plan-2"]
    first, second = sm.fake.created
    assert (preferences(first), preferences(second)) == ([P5, P4DE], [P4DE])
    one_checkpoint_prefix(sm, "trainstack-plan")  # the second job resumes the first one's checkpoint
    assert outcome.output["retriedFaults"] == []  # no fault: fault_retries is untouched
    assert outcome.output["instanceType"] == P4DE
    assert assigned(outcome, "ClassifyAttempt", "backoffSeconds") == []  # no back-off
    assert assigned(outcome, "ClassifyAttempt", "plansEnded") == [[P5]]


def test_with_no_preference_left_the_run_ends_capacity_exhausted_naming_the_plan(interpreter):
    sm = interpreter(job_scripts=[[STARTING, PLAN_ENDING]])
    outcome = sm.run({"runName": "trainstack-planend"})
    assert (outcome.status, outcome.error) == ("FAILED", "CapacityExhausted")
    assert list(sm.fake.jobs) == ["trainstack-planend-1", "trainstack-planend-2"]
    assert outcome.cause.startswith(
        f"The training plan of {P4DE} ended the instances of job trainstack-planend-2 after its checkpoint, "
        "and the profile has no other instance preference; the checkpoints in "
        "s3://trainstack-checkpoints-test/trainstack-planend/ resume the run (same runName, or resumeFrom) "
        "on new capacity. Training job trainstack-planend-2 failed: AlgorithmError: "
        "trainstack-fault:infrastructure:plan-ending"
    ), outcome.cause
