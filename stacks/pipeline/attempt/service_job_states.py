"""The queued attempt's states around the AWS Batch service job (attempt/queued_training_attempt.py composes
them): submit it once, poll DescribeServiceJob, check what Batch says of it, and terminate it when it
outlives its time limit or the run's cost cap. The queued attempt's module docstring says why each behaves
as it does (Batch user guide, botocore's batch model)."""

from __future__ import annotations

import json

from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.pipeline.attempt.batch_training_jobs import earlier_training_jobs
from stacks.pipeline.attempt.training_attempt import outcome, report_when
from stacks.pipeline.cost_cap_states import ATTEMPT_CAP, BUDGET_STOP_ASSIGN, BUDGET_STOP_COMMENT
from stacks.pipeline.jsonata_text import expression
from stacks.pipeline.machine_kit import (
    BATCH_CLIENT_ERROR,
    BATCH_TRANSIENT_ERRORS,
    describe_service_job,
    retry_must_succeed_call,
    retry_poll_call,
)
from stacks.pipeline.queue.training_queue import CAPACITY_REASON, service_job_name
from stacks.pipeline.quota_waits import quota_outcome
from trainstack.jsonata_regex import regex_literal
from trainstack.queue_settings import EVALUATION_KEY_PREFIX
from trainstack.registry import EVALUATION_JOB_PATTERN

TIME_LIMIT_PREFIX = "Terminated by JobStateTimeLimit action due to reason: " + CAPACITY_REASON
# Service job states in which the training job has its instances: the time limit counts only there.
HAS_INSTANCES = ("STARTING", "RUNNING")


def submit_service_job(
    scope: Construct, partition: str, job_queue_arn: str, queue_name: str, report: sfn.IChainable
) -> sfn.CustomState:
    request = "$states.input.request"
    # Training attempt N: `<runName>-N`, so N; evaluation job N: queue_settings.evaluation_job_key(N).
    evaluation = f"$match({request}.TrainingJobName, {regex_literal(EVALUATION_JOB_PATTERN)})[0]"
    attempt = (
        f'($e := {evaluation}; $exists($e) ? "{EVALUATION_KEY_PREFIX}" & '
        "$formatBase($e.groups[0] ? $number($e.groups[0]) : 1, 36) : "
        f"$substring({request}.TrainingJobName, $length($states.input.runName) + 1))"
    )
    job_name = service_job_name(queue_name, "$states.input.runName", attempt)
    submit = sfn.CustomState(
        scope,
        "SubmitServiceJob",
        state_json={
            "Type": "Task",
            "Resource": f"arn:{partition}:states:::aws-sdk:batch:submitServiceJob",
            # One JSONata value: schedulingPriority and shareIdentifier only when the run has them.
            "Arguments": expression(
                f"$merge([{{"
                f'"JobName": {job_name}, "JobQueue": "{job_queue_arn}", '
                '"ServiceJobType": "SAGEMAKER_TRAINING", '
                f'"ServiceRequestPayload": $string({request}), '
                f'"Tags": $merge({request}.Tags.{{Key: Value}})}}, '
                "$exists($states.input.priority) and $states.input.priority != null ? "
                '{"SchedulingPriority": $states.input.priority} : {}, '
                "$exists($states.input.share) and $states.input.share != null ? "
                '{"ShareIdentifier": $states.input.share} : {}])'
            ),
            "Assign": {
                "service": expression('{"id": $states.result.JobId, "status": "SUBMITTED"}'),
                "job": expression(f'{{"name": {request}.TrainingJobName, "createdMillis": $millis()}}'),
                "limits": expression('{"timeLimitSeconds": $states.input.timeLimitSeconds}'),
                "runningSince": expression("0"),
                # The earlier training jobs counted (batch_training_jobs.py).
                "ended": [],
            },
            "Output": {},
        },
    )
    retry_must_succeed_call(submit, BATCH_TRANSIENT_ERRORS)
    submit.add_catch(
        report,
        errors=[BATCH_CLIENT_ERROR, *BATCH_TRANSIENT_ERRORS],
        assign={
            "job": expression(f'{{"name": {request}.TrainingJobName}}'),
            "outcome": outcome(
                "Rejected", '"AWS Batch refused the training job: " & $states.errorOutput.Cause'
            ),
        },
    )
    return submit


def poll_service_job(scope: Construct, wait: sfn.IChainable) -> tasks.CallAwsService:
    describe = describe_service_job(
        scope,
        "DescribeServiceJob",
        "$service.id",
        {
            "service": expression(
                '{"id": $service.id, "status": $states.result.Status, '
                '"reason": $states.result.StatusReason, '
                '"trainingJobArn": $states.result.LatestAttempt.ServiceResourceId.Value, '
                f'"earlier": {earlier_training_jobs("$states.result")}}}'
            ),
            # Reset whenever the job waits again (a capacity failure sends it back to RUNNABLE).
            "runningSince": expression(
                f"$states.result.Status in {json.dumps(HAS_INSTANCES)} "
                "? ($runningSince = 0 ? $millis() : $runningSince) : 0"
            ),
        },
    )
    retry_poll_call(describe, BATCH_TRANSIENT_ERRORS)
    describe.add_catch(wait, errors=[BATCH_CLIENT_ERROR, *BATCH_TRANSIENT_ERRORS], outputs={})
    return describe


def terminate_overdue_service_job(
    scope: Construct, service_job_arn: str, wait: sfn.IChainable, report: sfn.IChainable
) -> tasks.CallAwsService:
    terminate = tasks.CallAwsService.jsonata(
        scope,
        "TerminateOverdueServiceJob",
        comment="The job outlived its time limit since Batch started it: terminate it.",
        service="batch",
        action="terminateServiceJob",
        parameters={
            "JobId": expression("$service.id"),
            "Reason": expression('"trainstack: time limit of " & $string($limits.timeLimitSeconds) & " s"'),
        },
        iam_resources=[service_job_arn],
        assign={
            "outcome": outcome(
                "Overdue",
                '"Service job " & $job.name & " was terminated by the pipeline after " & '
                '$string($limits.timeLimitSeconds) & " seconds, its time limit (maxRuntimeHours + '
                'start-up allowance), counted from when Batch started it."',
            )
        },
        outputs={},
    )
    retry_poll_call(terminate, BATCH_TRANSIENT_ERRORS)
    terminate.add_catch(wait, errors=[BATCH_CLIENT_ERROR, *BATCH_TRANSIENT_ERRORS], outputs={})
    terminate.next(report)
    return terminate


def terminate_over_budget_service_job(
    scope: Construct, service_job_arn: str, wait: sfn.IChainable
) -> tasks.CallAwsService:
    """The cost cap's stop: terminating the service job stops its training job ("For SageMaker Training
    jobs, this will stop the training job in SageMaker AI as well": Batch user guide, "Terminate service
    jobs") and ends the service job, as the overdue stop does. Then the next poll, until the training job
    has stopped (when Batch shows the service job FAILED is assumed: either way, docs/emulator.md)."""
    terminate = tasks.CallAwsService.jsonata(
        scope,
        "TerminateOverBudgetServiceJob",
        comment=BUDGET_STOP_COMMENT,
        service="batch",
        action="terminateServiceJob",
        parameters={
            "JobId": expression("$service.id"),
            "Reason": "trainstack: the run's billed cost passed max_cost_usd",
        },
        iam_resources=[service_job_arn],
        assign=BUDGET_STOP_ASSIGN,
        outputs={},
    )
    retry_poll_call(terminate, BATCH_TRANSIENT_ERRORS)
    # The job may just have ended: the next poll tells.
    terminate.add_catch(wait, errors=[BATCH_CLIENT_ERROR, *BATCH_TRANSIENT_ERRORS], outputs={})
    terminate.next(wait)
    return terminate


def check_service_job(
    scope: Construct,
    report: sfn.IChainable,
    describe_started_job: sfn.IChainable,
    terminate: sfn.IChainable,
    wait: sfn.IChainable,
) -> sfn.Choice:
    """What Batch says of the service job: ended (how), overdue, or still to be waited for."""
    status = "$service.status"
    reason = '($service.reason ? $service.reason : "")'
    failed = f'{status} = "FAILED"'
    capacity_time_limit = (
        f'{failed} and $substring({reason}, 0, {len(TIME_LIMIT_PREFIX)}) = "{TIME_LIMIT_PREFIX}"'
    )
    capacity_cause = (
        '"AWS Batch kept meeting insufficient capacity for " & $job.name & '
        '" and gave up after the queue\'s capacity_wait_hours: " & $service.reason'
    )
    training_job_ended = f'{status} = "SUCCEEDED" or ({failed} and $exists($service.trainingJobArn))'
    # A FAILED service job without a training job: condition, the attempt's output. A quota refusal
    # is assumed to arrive as Batch's statusReason "Received status from SageMaker:" + SageMaker's
    # code and message (the form Batch's guide and the SageMaker Python SDK quote for other errors).
    failed_before_training = (
        (
            f'{failed} and $contains({reason}, "ResourceLimitExceeded")',
            quota_outcome("$service.reason", '"SageMaker refused service job " & $job.name'),
        ),
        (
            f'{failed} and $contains({reason}, "ValidationException")',
            outcome("Rejected", '"SageMaker rejected the request: " & $service.reason'),
        ),
        (
            failed,
            outcome(
                "Stopped",
                '"Service job " & $job.name & " was terminated before it started: " & $service.reason',
            ),
        ),
    )
    overdue = "$runningSince > 0 and $millis() > $runningSince + $limits.timeLimitSeconds * 1000"
    # With a cost cap, a training job that has its instances is described on every poll for its cost.
    capped_and_running = (
        f'$type({ATTEMPT_CAP}) = "object" and {status} in {json.dumps(HAS_INSTANCES)} and '
        "$exists($service.trainingJobArn)"
    )
    check = sfn.Choice.jsonata(scope, "CheckServiceJob")
    report_when(check, capacity_time_limit, report, outcome("Capacity", capacity_cause))
    check.when(sfn.Condition.jsonata(expression(training_job_ended)), describe_started_job)
    for condition, result in failed_before_training:
        report_when(check, condition, report, result)
    check.when(sfn.Condition.jsonata(expression(overdue)), terminate)
    check.when(sfn.Condition.jsonata(expression(capped_and_running)), describe_started_job)
    return check.otherwise(wait)
