"""Queue mode's attempt: the same CreateTrainingJob request, submitted to the AWS Batch job queue.

Same contract as the direct attempt (attempt/training_attempt.py), so the pipeline runs either one:
input {"request", "runName", "stopAtMillis", "timeLimitSeconds", "throttles"} plus "priority" and
"share" (null when not used); output {"status", "cause", "job"}, status one of the attempt statuses.

Batch holds the job RUNNABLE until the service environment has room, starts the training job
(SCHEDULED, STARTING, RUNNING) and re-submits it by itself after capacity errors until it runs or has
waited the queue's capacity time limit. So this attempt:
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
- at the end describes the training job Batch started, by the name in DescribeServiceJob's
  latestAttempt.serviceResourceId (botocore's batch model: LatestServiceJobAttempt.serviceResourceId
  {name: TrainingJobArn, value}); Batch names it `AWSBatch<jobName><attemptId>`, not like the request.
"""

from __future__ import annotations

import json

from aws_cdk import Duration
from aws_cdk import aws_iam as iam
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.pipeline.attempt.training_attempt import (
    SAGEMAKER_ERROR,
    describe_training_job,
    failed_outcome,
    outcome,
    poll_wait,
)
from stacks.pipeline.jsonata_text import expression
from stacks.pipeline.queue.training_queue import CAPACITY_REASON, service_job_name
from trainstack.config import Settings

# aws-sdk:batch:* error names (botocore's batch model declares ClientException and ServerException;
# everything else, throttling included, is Batch.BatchException).
CLIENT_ERROR = "Batch.ClientException"
TRANSIENT_ERRORS = ["Batch.ServerException", "Batch.BatchException"]
TIME_LIMIT_PREFIX = "Terminated by JobStateTimeLimit action due to reason: " + CAPACITY_REASON
# Service job states in which the training job has its instances: the time limit counts only there.
HAS_INSTANCES = ("STARTING", "RUNNING")


def queue_attempt_fields(settings: Settings) -> dict[str, str]:
    """What the pipeline adds to a queued attempt's input: Batch's schedulingPriority and shareIdentifier,
    from the execution input (checked already), else the profile's priority and the queue's first share;
    null when there is none. `$plan.profile` names the run's profile."""
    given = "$states.context.Execution.Input"
    priorities = {
        profile.name: profile.priority for profile in settings.profiles if profile.priority is not None
    }
    default_share = next(iter(settings.queue.shares), None)
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
    ) -> None:
        """job_arns: training jobs named like the request; batch_job_permissions: the statements that let
        the attempt describe the training jobs Batch names itself (training_queue.batch_training_jobs)."""
        super().__init__(scope, construct_id)
        report = sfn.Succeed.jsonata(self, "ReportOutcome", outputs=expression("$outcome"))
        request = "$states.input.request"
        attempt = f"$substring({request}.TrainingJobName, $length($states.input.runName) + 1)"
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
                },
                "Output": {},
            },
        )
        transient = {
            "errors": TRANSIENT_ERRORS,
            "interval": Duration.seconds(2),
            "backoff_rate": 2,
            "max_attempts": 6,
            "max_delay": Duration.seconds(120),
            "jitter_strategy": sfn.JitterType.FULL,
        }
        submit.add_retry(**transient)
        submit.add_catch(
            report,
            errors=[CLIENT_ERROR, *TRANSIENT_ERRORS],
            assign={
                "job": expression(f'{{"name": {request}.TrainingJobName}}'),
                "outcome": outcome(
                    "Rejected", '"AWS Batch refused the training job: " & $states.errorOutput.Cause'
                ),
            },
        )

        wait = poll_wait(self, "WaitForServiceJob")
        describe = tasks.CallAwsService.jsonata(
            self,
            "DescribeServiceJob",
            service="batch",
            action="describeServiceJob",
            parameters={"JobId": expression("$service.id")},
            # DescribeServiceJob supports no resource types (Service Authorization Reference, AWS Batch).
            iam_resources=["*"],
            assign={
                "service": expression(
                    '{"id": $service.id, "status": $states.result.Status, '
                    '"reason": $states.result.StatusReason, '
                    '"trainingJobArn": $states.result.LatestAttempt.ServiceResourceId.Value}'
                ),
                # Reset whenever the job waits again (a capacity failure sends it back to RUNNABLE).
                "runningSince": expression(
                    f"$states.result.Status in {json.dumps(HAS_INSTANCES)} "
                    "? ($runningSince = 0 ? $millis() : $runningSince) : 0"
                ),
            },
            outputs={},
        )
        describe.add_retry(**transient)
        describe.add_catch(wait, errors=[CLIENT_ERROR, *TRANSIENT_ERRORS], outputs={})

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
        terminate.add_retry(**transient)
        terminate.add_catch(wait, errors=[CLIENT_ERROR, *TRANSIENT_ERRORS], outputs={})
        terminate.next(report)

        # The training job Batch started: its name is the ARN's last part (Batch's guide shows ARNs
        # training-job/AWSBatch<jobName><attemptId>; should SageMaker write the ARN in lower case, the
        # request's own name is used when it is that name).
        arn_name = '$split($service.trainingJobArn, "/")[-1]'
        describe_started_job = describe_training_job(
            self,
            name=f"($lowercase($job.name) = {arn_name} ? $job.name : {arn_name})",
            job_arns=job_arns,
            with_name=True,
            more_permissions=batch_job_permissions,
        )
        # Retries used up: ask Batch and SageMaker again after the next wait.
        describe_started_job.add_catch(wait, errors=[SAGEMAKER_ERROR], outputs={})
        status = "$described.status"
        classify_training_job = (
            sfn.Choice.jsonata(self, "ClassifyTrainingJob")
            .when(
                sfn.Condition.jsonata(expression(f'{status} = "Completed"')),
                report,
                assign={"outcome": outcome("Completed")},
            )
            .when(
                sfn.Condition.jsonata(expression(f'{status} = "Failed"')),
                report,
                assign={"outcome": failed_outcome()},
            )
            .otherwise(
                sfn.Pass.jsonata(
                    self,
                    "TrainingJobStopped",
                    assign={
                        "outcome": outcome(
                            "Stopped",
                            '"Training job " & $job.name & " was stopped (" & $described.secondary & "): " & '
                            "$service.reason",
                        )
                    },
                ).next(report)
            )
        )
        describe_started_job.next(classify_training_job)

        service_status = "$service.status"
        reason = '($service.reason ? $service.reason : "")'
        check = (
            sfn.Choice.jsonata(self, "CheckServiceJob")
            .when(
                sfn.Condition.jsonata(
                    expression(
                        f'{service_status} = "FAILED" and '
                        f"$substring({reason}, 0, {len(TIME_LIMIT_PREFIX)}) = "
                        f'"{TIME_LIMIT_PREFIX}"'
                    )
                ),
                report,
                assign={
                    "outcome": outcome(
                        "Capacity",
                        '"AWS Batch kept meeting insufficient capacity for " & $job.name & '
                        '" and gave up after the queue\'s capacity_wait_hours: " & $service.reason',
                    )
                },
            )
            .when(
                sfn.Condition.jsonata(
                    expression(
                        f'{service_status} = "SUCCEEDED" or ({service_status} = "FAILED" and '
                        "$exists($service.trainingJobArn))"
                    )
                ),
                describe_started_job,
            )
            .when(
                sfn.Condition.jsonata(
                    expression(
                        f'{service_status} = "FAILED" and $contains({reason}, "ResourceLimitExceeded")'
                    )
                ),
                report,
                assign={
                    "outcome": outcome(
                        "Quota",
                        '"SageMaker refused the job: a service quota is exhausted (" & '
                        '$service.reason & ")."',
                    )
                },
            )
            .when(
                sfn.Condition.jsonata(
                    expression(f'{service_status} = "FAILED" and $contains({reason}, "ValidationException")')
                ),
                report,
                assign={
                    "outcome": outcome("Rejected", '"SageMaker rejected the request: " & $service.reason')
                },
            )
            .when(
                sfn.Condition.jsonata(expression(f'{service_status} = "FAILED"')),
                report,
                assign={
                    "outcome": outcome(
                        "Stopped",
                        '"Service job " & $job.name & " was terminated before it started: " & '
                        "$service.reason",
                    )
                },
            )
            .when(
                sfn.Condition.jsonata(
                    expression(
                        "$runningSince > 0 and $millis() > $runningSince + $limits.timeLimitSeconds * 1000"
                    )
                ),
                terminate,
            )
            .otherwise(wait)
        )
        submit.next(wait)
        wait.next(describe)
        describe.next(check)
        self.start: sfn.IChainable = submit
