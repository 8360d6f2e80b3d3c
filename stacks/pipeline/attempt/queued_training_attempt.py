"""Queue mode's attempt: the same CreateTrainingJob request, submitted to the AWS Batch job queue.

Same contract as the direct attempt (attempt/training_attempt.py), so the pipeline runs either one:
input {"request", "runName", "stopAtMillis", "timeLimitSeconds", "throttles"} plus "priority" and
"share" (null when not used); output {"status", "cause", "job"}, status one of the attempt statuses. The
first state checks the request, the share and the priority against what the profiles and the queue allow
(request_guard.py): anything else ends the execution with the error RequestRefused before any
SubmitServiceJob.

Batch holds the job RUNNABLE until the service environment has room, starts the training job
(SCHEDULED, STARTING, RUNNING) and re-submits it by itself after capacity errors until it runs or has
waited the queue's capacity time limit. So this attempt:
- first claims the run name for the pipeline execution (queue/run_names.py): a name another execution
  holds ends the attempt `NameInUse` before anything is submitted, as CreateTrainingJob's ResourceInUse
  does without the queue;
- submits once (batch:SubmitServiceJob, no retryStrategy: Batch's capacity retries need none, and any
  other failure is the pipeline's to report), the service job named `<queue key><run key>-<attempt>`
  (queue_settings.service_job_name: short enough for Batch's training job name to fit SageMaker's 63
  characters, found again by the cleanup machine and the CLI) and tagged like the training job;
- polls DescribeServiceJob (an action without resource types, granted on "*"); the time limit
  (timeLimitSeconds) counts from when the latest training job Batch started got its instances (STARTING
  or RUNNING), never while the job waits RUNNABLE nor while it is SCHEDULED: that is capacity wait,
  which Batch itself limits (only time in SCHEDULED counts toward the queue's capacity time limit, and
  a capacity failure sends the job back to RUNNABLE: Batch user guide, "Jobs stuck in RUNNABLE due to
  capacity");
- with a cost cap (cost_cap_states.py), describes the training job Batch started on every poll while it
  has its instances, and once the attempt's billed cost (that job's plus what every training job Batch
  started for the service job before it billed: batch_training_jobs.py) passes what the run has left
  terminates the service job (which stops the training job), follows the training job until it has
  stopped and reports BudgetExceeded, as the direct attempt does; the output `job` carries that sum;
- at the end describes the training job Batch started, by the name in DescribeServiceJob's
  latestAttempt.serviceResourceId (botocore's batch model: LatestServiceJobAttempt.serviceResourceId
  {name: TrainingJobArn, value}); Batch names it `AWSBatch<jobName><attemptId>`, not like the request.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from aws_cdk import aws_iam as iam
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.pipeline.attempt.batch_training_jobs import (
    count_earlier_training_jobs,
    earlier_training_jobs,
    training_job_name,
)
from stacks.pipeline.attempt.training_attempt import (
    DESCRIBED_STATUS,
    describe_training_job,
    described_job,
    failed_outcome,
    outcome,
    poll_wait,
    report_when,
)
from stacks.pipeline.cost_cap_states import (
    ATTEMPT_CAP,
    BUDGET_STOP_ASSIGN,
    BUDGET_STOP_COMMENT,
    add_attempt_budget_stop,
    poll_within_budget,
)
from stacks.pipeline.jsonata_text import expression
from stacks.pipeline.machine_kit import (
    BATCH_CLIENT_ERROR,
    BATCH_TRANSIENT_ERRORS,
    SAGEMAKER_ERROR,
    describe_service_job,
    retry_must_succeed_call,
    retry_poll_call,
)
from stacks.pipeline.queue.run_names import RunNameTable, claim_run_name, name_in_use_cause
from stacks.pipeline.queue.training_queue import CAPACITY_REASON, service_job_name
from stacks.pipeline.quota_waits import quota_outcome
from stacks.pipeline.request_guard import queued_fields_problem, refuse_unless_allowed, request_problem
from trainstack.job_request import EXECUTION_TAG
from trainstack.jsonata_regex import regex_literal
from trainstack.profiles import Profile
from trainstack.queue_settings import EVALUATION_KEY_PREFIX, QueueSettings
from trainstack.registry import EVALUATION_JOB_PATTERN

TIME_LIMIT_PREFIX = "Terminated by JobStateTimeLimit action due to reason: " + CAPACITY_REASON
# Service job states in which the training job has its instances: the time limit counts only there.
HAS_INSTANCES = ("STARTING", "RUNNING")


def queue_attempt_fields(profiles: Sequence[Profile], queue: QueueSettings) -> dict[str, str]:
    """What the pipeline adds to a queued attempt's input: Batch's schedulingPriority and shareIdentifier,
    from the execution input (checked already), else the profile's priority and the queue's first share;
    null when there is none. `$plan.profile` names the run's profile."""
    given = "$states.context.Execution.Input"
    priorities = {profile.name: profile.priority for profile in profiles if profile.priority is not None}
    default_share = next(iter(queue.shares), None)
    return {
        "priority": expression(
            f"$exists({given}.priority) ? {given}.priority : "
            f"($p := $lookup({json.dumps(priorities)}, $plan.profile); $exists($p) ? $p : null)"
        ),
        "share": expression(f"$exists({given}.share) ? {given}.share : {json.dumps(default_share)}"),
    }


class QueuedTrainingAttempt(Construct):
    """The queued attempt's chain of states (`self.start`); the caller builds the machine."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        partition: str,
        job_queue_arn: str,
        queue_name: str,
        job_arns: list[str],
        service_job_arn: str,
        batch_job_permissions: list[iam.PolicyStatement],
        run_names: RunNameTable,
        allowed: dict[str, Any],
    ) -> None:
        """job_arns: training jobs named like the request; batch_job_permissions: the statements that let
        the attempt describe the training jobs Batch names itself (training_queue.batch_training_jobs);
        run_names: the table the run name is claimed in; allowed: request_guard.allowed_requests of the
        pipeline."""
        super().__init__(scope, construct_id)
        report = sfn.Succeed.jsonata(self, "ReportOutcome", outputs=expression("$outcome"))
        submit = self._submit_service_job(partition, job_queue_arn, queue_name, report)
        wait = poll_wait(self, "WaitForServiceJob", bound=poll_within_budget)
        describe = self._describe_service_job(wait)
        terminate = self._terminate_overdue_service_job(service_job_arn, wait, report)
        describe_started_job = self._describe_started_training_job(
            job_arns,
            batch_job_permissions,
            wait,
            report,
            self._terminate_over_budget_service_job(service_job_arn, wait),
        )
        check = self._check_service_job(report, describe_started_job, terminate, wait)
        count_earlier = count_earlier_training_jobs(
            self, job_arns=job_arns, more_permissions=batch_job_permissions, then=check, wait=wait
        )

        given = "$states.context.Execution.Input"
        claim = claim_run_name(
            self,
            run_names,
            run_name=f"{given}.runName",
            # The pipeline execution that owns the run: the execution its jobs are tagged with.
            owner=f"{given}.request.Tags[Key = {json.dumps(EXECUTION_TAG)}].Value",
            in_use=sfn.Pass.jsonata(
                self,
                "RunNameInUse",
                assign={
                    "outcome": outcome("NameInUse", name_in_use_cause(f"{given}.runName"), with_job=False)
                },
            ).next(report),
        )
        claim.next(submit).next(wait).next(describe).next(count_earlier)
        problem = (
            f"($q := {request_problem(allowed, '$states.input.request')}; $q != null ? $q : "
            f"{queued_fields_problem(allowed, '$states.input.share', '$states.input.priority')})"
        )
        # The request is checked before its run name is claimed: a refused request claims nothing.
        self.start: sfn.IChainable = refuse_unless_allowed(self, problem, claim)

    def _submit_service_job(
        self, partition: str, job_queue_arn: str, queue_name: str, report: sfn.IChainable
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
            self,
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

    def _describe_service_job(self, wait: sfn.IChainable) -> tasks.CallAwsService:
        describe = describe_service_job(
            self,
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

    def _terminate_overdue_service_job(
        self, service_job_arn: str, wait: sfn.IChainable, report: sfn.IChainable
    ) -> tasks.CallAwsService:
        terminate = tasks.CallAwsService.jsonata(
            self,
            "TerminateOverdueServiceJob",
            comment="The job outlived its time limit since Batch started it: terminate it.",
            service="batch",
            action="terminateServiceJob",
            parameters={
                "JobId": expression("$service.id"),
                "Reason": expression(
                    '"trainstack: time limit of " & $string($limits.timeLimitSeconds) & " s"'
                ),
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

    def _terminate_over_budget_service_job(
        self, service_job_arn: str, wait: sfn.IChainable
    ) -> tasks.CallAwsService:
        """The cost cap's stop: terminating the service job stops its training job ("For SageMaker Training
        jobs, this will stop the training job in SageMaker AI as well": Batch user guide, "Terminate service
        jobs") and ends the service job, as the overdue stop does. Then the next poll, until the training job
        has stopped (when Batch shows the service job FAILED is assumed: either way, docs/emulator.md)."""
        terminate = tasks.CallAwsService.jsonata(
            self,
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

    def _describe_started_training_job(
        self,
        job_arns: list[str],
        batch_job_permissions: list[iam.PolicyStatement],
        wait: sfn.IChainable,
        report: sfn.IChainable,
        stop_over_budget: sfn.IChainable,
    ) -> tasks.CallAwsService:
        """The latest training job Batch started: how it ended, or (with a cost cap, while it runs) its
        billed cost."""
        describe_started_job = describe_training_job(
            self,
            name=training_job_name("$service.trainingJobArn"),
            job_arns=job_arns,
            more_permissions=batch_job_permissions,
            assign={
                "described": expression(DESCRIBED_STATUS),
                # Every training job Batch started for the service job, by name (the registry's lineage).
                "job": expression(
                    f'$merge([{described_job(with_name=True)}, {{"trainingJobs": $append('
                    '$map($service.earlier, function($arn) { $split($arn, "/")[-1] }), '
                    "$states.result.TrainingJobName)}])"
                ),
            },
        )
        # Retries used up: ask Batch and SageMaker again after the next wait.
        describe_started_job.add_catch(wait, errors=[SAGEMAKER_ERROR], outputs={})
        status = "$described.status"
        stopped = sfn.Pass.jsonata(
            self,
            "TrainingJobStopped",
            assign={
                "outcome": outcome(
                    "Stopped",
                    '"Training job " & $job.name & " was stopped (" & $described.secondary & "): " & '
                    "$service.reason",
                )
            },
        )
        classify_training_job = sfn.Choice.jsonata(self, "ClassifyTrainingJob")
        add_attempt_budget_stop(classify_training_job, report, stop_over_budget)
        # Described for its cost while Batch has not ended the service job: any other end is Batch's to
        # report (a capacity failure, say, sends the service job back to RUNNABLE). After the cost cap's
        # stop: poll on until the training job has stopped.
        not_ended = (
            f"$service.status in {json.dumps(HAS_INSTANCES)} or "
            f'($exists($budgetStop) and {status} in ["InProgress", "Stopping"])'
        )
        classify_training_job.when(sfn.Condition.jsonata(expression(not_ended)), wait)
        report_when(classify_training_job, f'{status} = "Completed"', report, outcome("Completed"))
        report_when(classify_training_job, f'{status} = "Failed"', report, failed_outcome())
        classify_training_job.otherwise(stopped.next(report))
        describe_started_job.next(classify_training_job)
        return describe_started_job

    def _check_service_job(
        self,
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
        check = sfn.Choice.jsonata(self, "CheckServiceJob")
        report_when(check, capacity_time_limit, report, outcome("Capacity", capacity_cause))
        check.when(sfn.Condition.jsonata(expression(training_job_ended)), describe_started_job)
        for condition, result in failed_before_training:
            report_when(check, condition, report, result)
        check.when(sfn.Condition.jsonata(expression(overdue)), terminate)
        check.when(sfn.Condition.jsonata(expression(capped_and_running)), describe_started_job)
        return check.otherwise(wait)
