"""The cost cap in the machines (trainstack.cost_cap has the figures and their sources): the input check's
rule, the run's cap and spend, the attempt's billed-cost stop and the pipeline's BudgetExceeded.

The pipeline keeps `$costCap` (null without max_cost_usd) and `$spentUsd` (the billed cost of the
attempts that ended). Each attempt gets the cap with what is left of it (`remainingUsd`); once its own
billed cost (job_usd: its job's, plus in queue mode what the training jobs Batch started for it before
that job billed) passes that, it stops the job (the direct attempt: StopTrainingJob; the queued one:
TerminateServiceJob, which stops the training job Batch started), follows it until it has stopped and
reports BudgetExceeded. The pipeline then fails the run with BudgetExceeded, and so it does instead of
retrying once the spend has reached the cap. The checkpoint prefix is left as it is, so a later run
resumes with resumeFrom.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.pipeline.jsonata_text import expression
from stacks.pipeline.machine_kit import SAGEMAKER_ERROR, retry_poll_call
from stacks.pipeline.pipeline_run_request import checkpoint_location_expression
from stacks.pipeline.state_machine_facts import ERROR_BUDGET_EXCEEDED, POLL_MIN_SECONDS
from trainstack.cost_cap import MAX_STEPS, evaluation_cost_usd, profile_steps, step_rates
from trainstack.prices import offline_training_prices
from trainstack.profiles import Profile

BUDGET_EXCEEDED_STATUS = "BudgetExceeded"
# The attempt's copy of the cap, from the pipeline (null without max_cost_usd).
ATTEMPT_CAP = "$states.context.Execution.Input.costCap"


def money(amount: str) -> str:
    """trainstack.cost_cap.usd in JSONata."""
    return f'"$" & $formatNumber({amount}, "#,##0.00")'


def profile_cost_cap(profile: Profile, region: str) -> dict[str, Any]:
    """The profile table's `costCap` entry (only for a profile with max_cost_usd), at `region`'s prices."""
    if profile.max_cost_usd is None:
        return {}
    prices = offline_training_prices(region)
    return {
        "costCap": {
            "maxUsd": profile.max_cost_usd,
            "steps": profile_steps(profile),
            # The evaluation job's planned cost (a profile with registry:; else 0).
            "evaluationUsd": evaluation_cost_usd(profile, prices),
            "rates": [
                {
                    "instanceType": rate.instance_type,
                    "instanceCount": rate.instance_count,
                    "usdPerInstanceStep": rate.usd_per_instance_step,
                }
                for rate in step_rates(profile, prices)
            ],
            "hourly": [
                {
                    "instanceType": preference.instance_type,
                    "instanceCount": preference.instance_count,
                    "usdPerInstanceHour": prices.hourly_usd(preference.instance_type),
                }
                for preference in profile.instance_preferences
            ],
        }
    }


# The run's instance count on an entry of the profile's rates or hourly prices.
_COUNT = "($exists($in.instanceCount) ? $in.instanceCount : instanceCount)"
# trainstack.cost_cap.planned_cost_usd (its evaluation job's included) over `$in` (the checked input) and
# `$p` (the profile's entry).
# The run's max_steps is plain digits (its input rule comes first), so $number reads what train.py will.
PLANNED_USD = (
    f"($s := $in.hyperparameters.{MAX_STEPS}; "
    "$steps := $exists($s) ? $number($s) : $p.costCap.steps; "
    f"$max($p.costCap.rates.(usdPerInstanceStep * $steps * {_COUNT})) + $p.costCap.evaluationUsd)"
)


def input_check() -> tuple[str, str, str]:
    """(field, condition that accepts, cause) of the input check's last rule: trainstack.cost_cap's. A team's
    own code (`code`) has no plan (the plan models train.py): only the billed cost stops it."""
    planned_in_cap = f"($planned := {PLANNED_USD}; $planned <= $p.costCap.maxUsd)"
    planned = "$exists($p.costCap) and $count($p.costCap.rates) > 0 and $not($exists($in.code))"
    accepts = f"({planned}) ? {planned_in_cap} : true"
    cause = (
        f'($planned := {PLANNED_USD}; "The run\'s planned cost of " & {money("$planned")} & '
        f'" exceeds the max_cost_usd of " & {money("$p.costCap.maxUsd")} & " of profile " & $p.name & '
        '"; lower max_steps or instanceCount, or raise max_cost_usd.")'
    )
    return "", accepts, cause


def prepare_run_assign() -> dict[str, str]:
    """The run's `$costCap` (prices by type, and the dearest preference's hourly price for a job whose
    type is not known yet) and `$spentUsd`, from `$checked` in PrepareRun."""
    cap = (
        "($p := $checked.profile; $in := $checked.input; $exists($p.costCap) ? "
        '{"maxUsd": $p.costCap.maxUsd, '
        '"usdPerInstanceHour": $merge($p.costCap.hourly.{instanceType: usdPerInstanceHour}), '
        f'"fallbackUsdPerHour": $max($p.costCap.hourly.(usdPerInstanceHour * {_COUNT}))}} : null)'
    )
    return {"costCap": expression(cap), "spentUsd": 0}


def hourly_usd(job: str, cap: str) -> str:
    """What one attempt's job ({instanceType, instanceCount}) costs an hour: the selected type's price,
    else the dearest preference's (SageMaker has not said which yet)."""
    return (
        f"($price := $lookup({cap}.usdPerInstanceHour, {job}.instanceType); "
        f'($type($price) = "number" and $type({job}.instanceCount) = "number") '
        f"? $price * {job}.instanceCount : {cap}.fallbackUsdPerHour)"
    )


def job_usd(job: str, cap: str) -> str:
    """The billed cost of one attempt's job ({billedSeconds, instanceType, instanceCount}), plus, in queue
    mode, `endedUsd`: what the training jobs AWS Batch started for the attempt before it billed
    (attempt/batch_training_jobs.py). So the attempt's output `job` carries the whole attempt's cost."""
    return (
        f'(($type({job}.billedSeconds) = "number" ? {job}.billedSeconds / 3600 * {hourly_usd(job, cap)} : 0)'
        f' + ($type({job}.endedUsd) = "number" ? {job}.endedUsd : 0))'
    )


def attempt_input() -> dict[str, str]:
    """The attempt's `costCap` input: the run's cap with what the ended attempts left of it."""
    return {
        "costCap": expression(
            '$type($costCap) = "object" ? '
            '$merge([$costCap, {"remainingUsd": $costCap.maxUsd - $spentUsd}]) : null'
        )
    }


def run_attempt_assign() -> dict[str, str]:
    """`$spentUsd` after an attempt, from its outcome."""
    job = "$states.result.Output.job"
    return {
        "spentUsd": expression(
            f'($type($costCap) = "object" and $type({job}) = "object") '
            f"? $spentUsd + {job_usd(job, '$costCap')} : $spentUsd"
        )
    }


def budget_spent_condition() -> str:
    """The attempt in `$outcome` stopped for the budget, or the ended attempts (`$spentUsd`) spent the cap:
    no retry follows (the pipeline's attempts and the registration machine's evaluation jobs)."""
    return (
        f'$outcome.status = "{BUDGET_EXCEEDED_STATUS}" or '
        '($type($costCap) = "object" and $spentUsd >= $costCap.maxUsd)'
    )


def add_budget_exceeded(scope: Construct, classify: sfn.Choice) -> None:
    """ClassifyAttempt's branch (before any retry): budget_spent_condition."""
    resume = (
        f'" The last checkpoint stays under " & {checkpoint_location_expression("$request")} & ": start '
        'a new run with resumeFrom set to it to continue."'
    )
    cause = (
        f'($outcome.status = "{BUDGET_EXCEEDED_STATUS}" ? $outcome.cause : '
        f'"The run\'s billed cost reached " & {money("$spentUsd")} & ", the max_cost_usd of " & '
        f'{money("$costCap.maxUsd")} & " of profile " & $plan.profile & ", after attempt " & '
        f'$string($attempt) & ": " & $outcome.cause) & {resume}'
    )
    classify.when(
        sfn.Condition.jsonata(expression(budget_spent_condition())),
        sfn.Fail.jsonata(scope, "BudgetExceeded", error=ERROR_BUDGET_EXCEEDED, cause=expression(cause)),
    )


# ---------------------------------------------------------------- the attempt machine


def billed_seconds(result: str) -> str:
    """A DescribeTrainingJob result's billed seconds so far (module docstring of trainstack.cost_cap).
    Timestamps are read as ISO 8601 text or as epoch seconds (docs/pipeline.md: assumed)."""
    return (
        '($millisOf := function($t) { $type($t) = "string" ? $toMillis($t) : '
        '($type($t) = "number" ? $t * 1000 : null) }; '
        f"$start := $millisOf({result}.TrainingStartTime); $end := $millisOf({result}.TrainingEndTime); "
        f'$type({result}.BillableTimeInSeconds) = "number" ? {result}.BillableTimeInSeconds : '
        '($type($start) = "number" ? (($type($end) = "number" ? $end : $millis()) - $start) / 1000 : 0))'
    )


def poll_within_budget(poll_seconds: str) -> str:
    """The poll wait, shortened so that the next poll comes when the job's cost reaches what the run has
    left (at least POLL_MIN_SECONDS): the stop then comes within a minute of billing past the cap."""
    cap = ATTEMPT_CAP
    to_cap = f"$round(({cap}.remainingUsd - {job_usd('$job', cap)}) / {hourly_usd('$job', cap)} * 3600)"
    billing = f'$type({cap}) = "object" and $type($job.billedSeconds) = "number" and $job.billedSeconds > 0'
    return f"({billing}) ? $max([{POLL_MIN_SECONDS}, $min([{poll_seconds}, {to_cap}])]) : {poll_seconds}"


# What the attempt's stop state assigns: the stop was the cost cap's (add_attempt_budget_stop).
BUDGET_STOP_ASSIGN = {"budgetStop": True}
BUDGET_STOP_COMMENT = "The run's billed cost passed max_cost_usd: stop the job (its checkpoints stay)."


def stop_over_budget_job(
    scope: Construct, wait_for_job: sfn.IChainable, job_arn: str
) -> tasks.CallAwsService:
    """The direct attempt's stop: StopTrainingJob, then the next poll."""
    stop = tasks.CallAwsService.jsonata(
        scope,
        "StopOverBudgetJob",
        comment=BUDGET_STOP_COMMENT,
        service="sagemaker",
        action="stopTrainingJob",
        parameters={"TrainingJobName": expression("$job.name")},
        iam_resources=[job_arn],
        assign=BUDGET_STOP_ASSIGN,
        outputs={},
    )
    retry_poll_call(stop, [SAGEMAKER_ERROR])
    # The job may just have ended: the next poll tells.
    stop.add_catch(wait_for_job, errors=[SAGEMAKER_ERROR], outputs={})
    stop.next(wait_for_job)
    return stop


def add_attempt_budget_stop(check_job: sfn.Choice, report: sfn.IChainable, stop: sfn.IChainable) -> None:
    """The branches of the Choice that reads `$described` (DescribeTrainingJob of the attempt's job): a job
    stopped for the budget reports BudgetExceeded; a running job whose billed cost passed what the run has
    left goes to `stop` (which assigns BUDGET_STOP_ASSIGN and leads to the next poll, so that the attempt
    follows the job until it has stopped)."""
    over = (
        f'$described.status = "InProgress" and $type({ATTEMPT_CAP}) = "object" and '
        f"{job_usd('$job', ATTEMPT_CAP)} > {ATTEMPT_CAP}.remainingUsd"
    )
    spent = f"({ATTEMPT_CAP}.maxUsd - {ATTEMPT_CAP}.remainingUsd + {job_usd('$job', ATTEMPT_CAP)})"
    # Queue mode: say what of it the earlier training jobs of the service job billed.
    earlier = (
        f'($type($job.endedUsd) = "number" and $job.endedUsd > 0 ? "; " & {money("$job.endedUsd")} & '
        '" of it by the training jobs AWS Batch started before it for this attempt" : "")'
    )
    cause = (
        '"Training job " & $job.name & " was stopped by the pipeline: the run\'s billed cost reached " & '
        f'{money(spent)} & ", over its max_cost_usd of " & {money(ATTEMPT_CAP + ".maxUsd")} & {earlier} & "."'
    )
    stopped = '$described.status = "Stopped" and $exists($budgetStop)'
    check_job.when(
        sfn.Condition.jsonata(expression(stopped)),
        report,
        assign={
            "outcome": expression(f'{{"status": "{BUDGET_EXCEEDED_STATUS}", "cause": {cause}, "job": $job}}')
        },
    )
    check_job.when(sfn.Condition.jsonata(expression(over)), stop)
