"""A training plan's planned interruption in the pipeline, as JSONata and states.

train.py ends an attempt as `infrastructure:plan-ending` when the plan's capacity block is about to end the
job's instances, after writing its checkpoint (training_scripts/capacity_block.py: SageMaker starts ending
them 30 minutes before the block's end). That is no failure of the run: ClassifyAttempt starts the next
attempt at once (no back-off, no fault retry counted) without the instance type whose plan ended
(`$plansEnded`, left out of every later request as quota_waits leaves out refused types), so SageMaker
takes the next instance preference and the job resumes from the checkpoint. With no preference left the
run ends `CapacityExhausted`, its cause naming the plan's end and the checkpoint that resumes the run.
"""

from __future__ import annotations

from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.pipeline.jsonata_text import expression, literal
from stacks.pipeline.pipeline_run_request import checkpoint_location_expression
from stacks.pipeline.state_machine_facts import ERROR_CAPACITY_EXHAUSTED
from training_scripts.fault_table import PLAN_ENDING_KIND

PLANS_ENDED = "plansEnded"
_ENDED = f'$outcome.status = "Failed" and $outcome.fault.kind = {literal(PLAN_ENDING_KIND)}'


def plan_start_assignments() -> dict[str, str]:
    """What the run starts with: no plan has ended."""
    return {PLANS_ENDED: expression("[]")}


def add_plan_ending_branches(
    scope: Construct, classify: sfn.Choice, run_attempt: sfn.IChainable, left: str
) -> None:
    """ClassifyAttempt's branches for an attempt its training plan ended; `left`: the instance types the
    run's request still offers (a JSONata expression of the request's preferences not left out)."""
    # The type the job ran on (DescribeTrainingJob's SelectedInstanceType); unreported, the first one left,
    # which SageMaker tries first.
    ended = f"($t := $outcome.job.instanceType; $exists($t) and $t != '' ? $t : {left}[0])"
    others = f"($e := {ended}; $filter({left}, function($t) {{ $t != $e }}))"
    classify.when(
        sfn.Condition.jsonata(expression(f"{_ENDED} and $count({others}) > 0")),
        run_attempt,
        assign={
            "attempt": expression("$attempt + 1"),
            PLANS_ENDED: expression(f"$append(${PLANS_ENDED}, [{ended}])"),
        },
        comment="The training plan ended the instances after a checkpoint: continue on the next preference.",
    )
    # Where the checkpoints lie, whatever the store (SageMaker's sync target or train.py's checkpoint_dir).
    cause = (
        '"The training plan of " & $outcome.job.instanceType & " ended the instances of job " & '
        '$outcome.job.name & " after its checkpoint, and the profile has no other instance preference; the '
        f'checkpoints in " & {checkpoint_location_expression("$request")} & " resume the run (same runName, '
        'or resumeFrom) on new capacity. " & $outcome.cause'
    )
    classify.when(
        sfn.Condition.jsonata(expression(_ENDED)),
        sfn.Fail.jsonata(
            scope, "PlanEndedNoPreferenceLeft", error=ERROR_CAPACITY_EXHAUSTED, cause=expression(cause)
        ),
    )
