"""One attempt of a training run, as its own state machine: create the job, poll it, report how it ended.

The pipeline starts one execution of this machine per attempt (states:startExecution.sync:2), so its
own history grows by a few events per attempt, and an attempt's history holds one job's polls.

Input: {"request": the complete CreateTrainingJob request, "runName", "stopAtMillis": when the pipeline
stops the job (epoch ms), "timeLimitSeconds": the same as a duration}. The first state checks the request
against what the profiles allow (request_guard.py): one they do not ends the execution with the error
RequestRefused before any CreateTrainingJob.
Output, otherwise always (the execution succeeds whatever happened to the job): {"status", "cause", "job"}
with status one of ATTEMPT_STATUSES and job {name, instanceType, instanceCount, artifacts} once described.

AWS's error names under aws-sdk:sagemaker:* (errors SageMaker's API model declares are
`SageMaker.<Code>Exception`; every other one, throttling and validation included, is
`SageMaker.SageMakerException` with the code and message only in the Cause) decide the paths:
- CreateTrainingJob: ResourceLimitExceeded is a quota, busy or exceeded (quota_waits.py: the pipeline
  decides), ResourceInUse a used run name; a
  SageMakerException is retried for a few seconds, then classified by its Cause: throttling is retried
  with capped, jittered backoff, anything else is SageMaker rejecting the request (InvalidInput).
- DescribeTrainingJob / StopTrainingJob: a SageMakerException is retried with backoff; when the retries
  run out the next poll asks again. A throttled status call never ends the attempt nor stops its job.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_iam as iam
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.pipeline.cost_cap_states import (
    BUDGET_EXCEEDED_STATUS,
    add_attempt_budget_stop,
    billed_seconds,
    poll_within_budget,
    stop_over_budget_job,
)
from stacks.pipeline.jsonata_text import expression, literal
from stacks.pipeline.machine_kit import (
    SAGEMAKER_ERROR,
    SAGEMAKER_IN_USE_ERROR,
    SAGEMAKER_QUOTA_ERROR,
    THROTTLE_CAUSE,
    retry_poll_call,
)
from stacks.pipeline.quota_waits import quota_outcome
from stacks.pipeline.request_guard import refuse_unless_allowed, request_problem
from stacks.pipeline.state_machine_facts import poll_seconds_expression
from trainstack.faults import SPOT_CAPACITY_SECONDARY_STATUS, capacity_expression, fault_expression

# What the pipeline does with each status: see training_state_machine.
ATTEMPT_STATUSES = (
    "Completed",
    "Capacity",
    "Throttled",
    "Failed",
    "Stopped",
    "Overdue",
    "Quota",
    "Rejected",
    "NameInUse",
    BUDGET_EXCEEDED_STATUS,
)
# A SageMakerException on create: retried this often (1 s, 2 s) before its Cause is read.
CREATE_QUICK_RETRIES = 2
# Throttled creates after the quick retries: this many more, 15 s doubling to 120 s, plus jitter.
CREATE_THROTTLE_LOOPS = 6
# What both attempt kinds (this one and the queued one) read from DescribeTrainingJob, and the cause
# of a failed job.
DESCRIBED_STATUS = (
    "($r := $states.result; "
    '{"status": $r.TrainingJobStatus, "secondary": $r.SecondaryStatus, '
    '"reason": $r.FailureReason})'
)
FAILED_JOB_CAUSE = (
    '$described.reason ? "Training job " & $job.name & " failed: " & $described.reason : '
    '"Training job " & $job.name & " failed without a FailureReason."'
)


def failed_outcome() -> str:
    """A Failed attempt's output (both attempt kinds): its cause and its fault, classified from the
    FailureReason by trainstack.faults' table."""
    return expression(
        f'{{"status": "Failed", "cause": {FAILED_JOB_CAUSE}, "job": $job, '
        f'"fault": {fault_expression("$described.reason")}}}'
    )


def billed_figures(result: str) -> str:
    """The members of a job's billed cost (cost_cap_states.job_usd) in a DescribeTrainingJob result: the
    instance type and count SageMaker chose among the preferences and the billed seconds."""
    config = f"{result}.ResourceConfig"
    return (
        f'"instanceType": {config}.SelectedInstanceType ? {config}.SelectedInstanceType : '
        f"{config}.InstanceType, "
        f'"instanceCount": {config}.SelectedInstanceCount ? {config}.SelectedInstanceCount : '
        f'{config}.InstanceCount, "billedSeconds": {billed_seconds(result)}'
    )


def described_job(*, with_name: bool = False) -> str:
    """$job with what DescribeTrainingJob says of it: its billed figures, the model artifacts and, where
    the job was known by ARN only, its name."""
    name = '"name": $r.TrainingJobName, ' if with_name else ""
    return (
        "($r := $states.result; $merge([$job, {"
        f"{name}{billed_figures('$r')}, "
        '"artifacts": $r.ModelArtifacts.S3ModelArtifacts, "metrics": $r.FinalMetricDataList}]))'
    )


def poll_wait(scope: Construct, construct_id: str, bound: Callable[[str], str] = str) -> sfn.Wait:
    """The wait before the next status call, by the age of the attempt (both attempt kinds); `bound` may
    shorten it (poll_within_budget: to reach the cost cap's moment)."""
    seconds = poll_seconds_expression("($millis() - $job.createdMillis) / 1000")
    return sfn.Wait.jsonata(scope, construct_id, time=sfn.WaitTime.seconds(expression(bound(seconds))))


def describe_training_job(
    scope: Construct,
    *,
    name: str,
    job_arns: list[str],
    with_name: bool = False,
    more_permissions: list[iam.PolicyStatement] | None = None,
    construct_id: str = "DescribeTrainingJob",
    assign: dict[str, str] | None = None,
) -> tasks.CallAwsService:
    """DescribeTrainingJob of job `name` (a JSONata expression) into $described and $job (or `assign`),
    retried on throttling (both attempt kinds)."""
    describe = tasks.CallAwsService.jsonata(
        scope,
        construct_id,
        service="sagemaker",
        action="describeTrainingJob",
        parameters={"TrainingJobName": expression(name)},
        iam_resources=job_arns,
        additional_iam_statements=more_permissions,
        assign=assign
        or {
            "described": expression(DESCRIBED_STATUS),
            "job": expression(described_job(with_name=with_name)),
        },
        outputs={},
    )
    retry_poll_call(describe, [SAGEMAKER_ERROR])
    return describe


# SageMaker's validation message names its own field: say which input field that is.
REJECTED_FIELDS = (
    ("trainingJobName", "runName"),
    ("yperParameters", "hyperparameters"),
    ("nstanceCount", "instanceCount"),
    ("axRuntimeInSeconds", "maxRuntimeHours"),
    ("3Uri", "resumeFrom"),
)


def outcome(status: str, cause: str = "null", *, with_job: bool = True) -> str:
    """The attempt's output {"status", "cause", "job"} as a JSONata expression."""
    job = ', "job": $job' if with_job else ""
    return expression(f'{{"status": "{status}", "cause": {cause}{job}}}')


def report_when(choice: sfn.Choice, condition: str, report: sfn.IChainable, result: str) -> sfn.Choice:
    """The branch of an attempt's Choice that reports `result` (an outcome()) when `condition` holds."""
    return choice.when(sfn.Condition.jsonata(expression(condition)), report, assign={"outcome": result})


def _rejected_cause() -> str:
    chain = '"The input"'
    for needle, field in reversed(REJECTED_FIELDS):
        chain = f"($contains($c, {literal(needle)}) ? {literal(field)} : {chain})"
    return f'($c := $states.errorOutput.Cause; {chain} & " was rejected by SageMaker: " & $c)'


JOB_NAME = "$states.context.Execution.Input.request.TrainingJobName"


class TrainingAttempt(Construct):
    """The attempt state machine's chain of states (`self.start`); the caller builds the machine.
    `allowed`: request_guard.allowed_requests of the pipeline."""

    def __init__(
        self, scope: Construct, construct_id: str, *, partition: str, job_arn: str, allowed: dict[str, Any]
    ) -> None:
        super().__init__(scope, construct_id)
        self._job_arn = job_arn
        report = sfn.Succeed.jsonata(self, "ReportOutcome", outputs=expression("$outcome"))
        create = self._create_training_job(partition, report)
        wait_for_job = poll_wait(self, "WaitForJob", bound=poll_within_budget)
        describe = describe_training_job(self, name="$job.name", job_arns=[job_arn])
        # Retries used up: the next poll asks again.
        describe.add_catch(wait_for_job, errors=[SAGEMAKER_ERROR], outputs={})
        stop = self._stop_overdue_job(wait_for_job, report)
        check_job = self._check_job(report, stop, wait_for_job)

        create.next(wait_for_job).next(describe).next(check_job)
        self.start: sfn.IChainable = refuse_unless_allowed(
            self, request_problem(allowed, "$states.input.request"), create
        )

    def _create_training_job(self, partition: str, report: sfn.IChainable) -> sfn.CustomState:
        """One create task for every profile's request shape: the request is one JSONata value.
        CallAwsService takes Arguments as an object of fields only, hence a custom state."""
        create = sfn.CustomState(
            self,
            "CreateTrainingJob",
            state_json={
                "Type": "Task",
                "Resource": f"arn:{partition}:states:::aws-sdk:sagemaker:createTrainingJob",
                "Arguments": expression("$states.context.Execution.Input.request"),
                "Assign": {
                    "job": expression(f'{{"name": {JOB_NAME}, "createdMillis": $millis()}}'),
                    "limits": expression(
                        '{"stopAtMillis": $states.context.Execution.Input.stopAtMillis, '
                        '"timeLimitSeconds": $states.context.Execution.Input.timeLimitSeconds}'
                    ),
                },
                "Output": {},
            },
        )
        create.add_retry(
            errors=[SAGEMAKER_ERROR],
            interval=Duration.seconds(1),
            backoff_rate=2,
            max_attempts=CREATE_QUICK_RETRIES,
        )
        name_in_use = (
            '"runName " & $states.context.Execution.Input.runName & " is already used by training job " & '
            f'{JOB_NAME} & "; choose another runName."'
        )
        create.add_catch(
            report,
            errors=[SAGEMAKER_QUOTA_ERROR],
            assign={
                "outcome": quota_outcome(
                    "$states.errorOutput.Cause", f'"SageMaker refused job " & {JOB_NAME}'
                )
            },
        )
        create.add_catch(
            report,
            errors=[SAGEMAKER_IN_USE_ERROR],
            assign={"outcome": outcome("NameInUse", name_in_use, with_job=False)},
        )
        create.add_catch(
            self._classify_create_error(create, report),
            errors=[SAGEMAKER_ERROR],
            assign={
                # Unless its Cause says throttling, the error is SageMaker rejecting the request.
                "outcome": outcome("Rejected", _rejected_cause(), with_job=False),
                "createError": expression("$states.errorOutput"),
                "throttles": expression("$exists($throttles) ? $throttles + 1 : 1"),
            },
        )
        return create

    def _classify_create_error(self, create: sfn.IChainable, report: sfn.IChainable) -> sfn.Choice:
        """Throttled: wait (15 s doubling to 120 s, plus jitter) and create again, up to
        CREATE_THROTTLE_LOOPS times, then report Throttled; any other error is a rejection."""
        wait_after_throttle = sfn.Wait.jsonata(
            self,
            "WaitAfterThrottle",
            time=sfn.WaitTime.seconds(
                expression(
                    "($base := $min([120, 15 * $power(2, $throttles - 1)]); "
                    "$base + $floor($random() * 0.5 * $base))"
                )
            ),
        )
        throttled = f"$contains($createError.Cause, {THROTTLE_CAUSE})"
        # A refusal in the fault table's capacity wording: an undeclared code, so SageMakerException
        # (assumed: no AWS source documents CreateTrainingJob refusing for capacity; docs/registry.md).
        refused_for_capacity = (
            f'"SageMaker found no capacity for job " & {JOB_NAME} & ": " & $createError.Cause'
        )
        return (
            sfn.Choice.jsonata(
                self,
                "ClassifyCreateError",
                comment="Throttling is retried; a capacity refusal is reported; anything else is rejected.",
            )
            .when(
                sfn.Condition.jsonata(expression(f"{throttled} and $throttles <= {CREATE_THROTTLE_LOOPS}")),
                wait_after_throttle.next(create),
            )
            .when(
                sfn.Condition.jsonata(expression(throttled)),
                report,
                assign={
                    "outcome": expression(
                        '{"status": "Throttled", "cause": "SageMaker kept throttling CreateTrainingJob: " & '
                        "$createError.Cause}"
                    )
                },
            )
            .when(
                sfn.Condition.jsonata(expression(capacity_expression("$createError.Cause"))),
                report,
                assign={"outcome": outcome("Capacity", refused_for_capacity, with_job=False)},
            )
            .otherwise(report)
        )

    def _stop_overdue_job(self, wait_for_job: sfn.IChainable, report: sfn.IChainable) -> tasks.CallAwsService:
        stop = tasks.CallAwsService.jsonata(
            self,
            "StopOverdueJob",
            comment="The job outlived MaxRuntimeInSeconds and every allowance: stop it.",
            service="sagemaker",
            action="stopTrainingJob",
            parameters={"TrainingJobName": expression("$job.name")},
            iam_resources=[self._job_arn],
            assign={
                "outcome": outcome(
                    "Overdue",
                    '"Training job " & $job.name & " was stopped by the pipeline after " & '
                    '$string($limits.timeLimitSeconds) & " seconds, its time limit (maxRuntimeHours + retry '
                    'deadline + start-up allowance)."',
                )
            },
            outputs={},
        )
        retry_poll_call(stop, [SAGEMAKER_ERROR])
        # A stop that fails (the job may just have ended) is followed by the next poll.
        stop.add_catch(wait_for_job, errors=[SAGEMAKER_ERROR], outputs={})
        stop.next(report)
        return stop

    def _check_job(self, report: sfn.IChainable, stop: sfn.IChainable, wait_for_job: sfn.IChainable):
        """How the job ended, or the stop once it is overdue, or the next poll."""
        status = "$described.status"
        # Capacity as the fault table recognises it, in any of SageMaker's wordings.
        capacity = (
            f'({status} = "Failed" and {capacity_expression("$described.reason")}) or '
            f'({status} = "Stopped" and $described.secondary = {literal(SPOT_CAPACITY_SECONDARY_STATUS)})'
        )
        capacity_cause = (
            '$described.reason ? $described.reason : "spot capacity did not come within '
            'MaxWaitTimeInSeconds (" & $described.secondary & ")"'
        )
        stopped_cause = '"Training job " & $job.name & " was stopped (" & $described.secondary & ")."'
        check_job = sfn.Choice.jsonata(self, "CheckJob")
        report_when(check_job, f'{status} = "Completed"', report, outcome("Completed"))
        report_when(check_job, capacity, report, outcome("Capacity", capacity_cause))
        report_when(check_job, f'{status} = "Failed"', report, failed_outcome())
        add_attempt_budget_stop(check_job, report, stop_over_budget_job(self, wait_for_job, self._job_arn))
        report_when(check_job, f'{status} = "Stopped"', report, outcome("Stopped", stopped_cause))
        return check_job.when(
            sfn.Condition.jsonata(expression("$millis() > $limits.stopAtMillis")), stop
        ).otherwise(wait_for_job)
