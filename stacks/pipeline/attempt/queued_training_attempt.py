"""Queue mode's attempt: the same CreateTrainingJob request, submitted to the AWS Batch job queue.

Same contract as the direct attempt (attempt/training_attempt.py), so the pipeline runs either one:
input {"request", "runName", "stopAtMillis", "timeLimitSeconds", "throttles"} plus "priority" and
"share" (null when not used); output {"status", "cause", "job"}, status one of the attempt statuses.

Batch holds the job RUNNABLE until the service environment has room, starts the training job
(SCHEDULED, STARTING, RUNNING) and re-submits it by itself after capacity errors until it runs or has
waited the queue's capacity time limit. So this attempt:
- submits once (batch:SubmitServiceJob, no retryStrategy: Batch's capacity retries need none, and any
  other failure is the pipeline's to report), the service job named like the training job and tagged
  like it, so the cleanup machine can find an execution's service jobs;
- polls DescribeServiceJob; the time limit (timeLimitSeconds) counts from when Batch started the job,
  never while it waits in the queue;
- at the end describes the training job Batch started (latestAttempt) for the outcome and the output.
"""

from __future__ import annotations

import json

from aws_cdk import Duration
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.pipeline.attempt.training_attempt import DESCRIBED_STATUS, FAILED_JOB_CAUSE, described_job
from stacks.pipeline.jsonata_text import expression
from stacks.pipeline.queue.training_queue import CAPACITY_REASON
from trainstack.config import Settings

# aws-sdk:batch:* error names (botocore's batch model declares ClientException and ServerException;
# everything else, throttling included, is Batch.BatchException).
CLIENT_ERROR = "Batch.ClientException"
TRANSIENT_ERRORS = ["Batch.ServerException", "Batch.BatchException"]
SAGEMAKER_ERROR = "SageMaker.SageMakerException"
TIME_LIMIT_PREFIX = "Terminated by JobStateTimeLimit action due to reason: " + CAPACITY_REASON
WAITING = ("SUBMITTED", "PENDING", "RUNNABLE")
# Polling: every minute at first, then a twentieth of the job's age, at most every 10 minutes.
POLL_MIN_SECONDS, POLL_MAX_SECONDS, POLL_AGE_DIVISOR = 60, 600, 20


def _outcome(status: str, cause: str = "null") -> str:
    return expression(f'{{"status": "{status}", "cause": {cause}, "job": $job}}')


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
        job_arn: str,
        service_job_arn: str,
    ) -> None:
        super().__init__(scope, construct_id)
        report = sfn.Succeed.jsonata(self, "ReportOutcome", outputs=expression("$outcome"))
        request = "$states.input.request"
        submit = sfn.CustomState(
            self,
            "SubmitServiceJob",
            state_json={
                "Type": "Task",
                "Resource": f"arn:{partition}:states:::aws-sdk:batch:submitServiceJob",
                # One JSONata value: schedulingPriority and shareIdentifier only when the run has them.
                "Arguments": expression(
                    f"$merge([{{"
                    f'"JobName": {request}.TrainingJobName, "JobQueue": "{job_queue_arn}", '
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
                "outcome": _outcome(
                    "Rejected", '"AWS Batch refused the training job: " & $states.errorOutput.Cause'
                ),
            },
        )

        age = "($millis() - $job.createdMillis) / 1000"
        wait = sfn.Wait.jsonata(
            self,
            "WaitForServiceJob",
            time=sfn.WaitTime.seconds(
                expression(
                    f"$max([{POLL_MIN_SECONDS}, "
                    f"$min([{POLL_MAX_SECONDS}, $round({age} / {POLL_AGE_DIVISOR})])])"
                )
            ),
        )
        describe = tasks.CallAwsService.jsonata(
            self,
            "DescribeServiceJob",
            service="batch",
            action="describeServiceJob",
            parameters={"JobId": expression("$service.id")},
            iam_resources=[service_job_arn],
            assign={
                "service": expression(
                    '{"id": $service.id, "status": $states.result.Status, '
                    '"reason": $states.result.StatusReason, '
                    '"trainingJobArn": $states.result.LatestAttempt.ServiceResourceId.Value}'
                ),
                "runningSince": expression(
                    f"$runningSince = 0 and $not($states.result.Status in {json.dumps(WAITING)}) "
                    "? $millis() : $runningSince"
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
                "outcome": _outcome(
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

        # The training job Batch started: its name is the ARN's last part (SageMaker writes ARNs in
        # lower case; the request's name is used when it is the same name).
        arn_name = '$split($service.trainingJobArn, "/")[-1]'
        training_job_name = f"($lowercase($job.name) = {arn_name} ? $job.name : {arn_name})"
        describe_training_job = tasks.CallAwsService.jsonata(
            self,
            "DescribeTrainingJob",
            service="sagemaker",
            action="describeTrainingJob",
            parameters={"TrainingJobName": expression(training_job_name)},
            iam_resources=[job_arn],
            assign={
                "described": expression(DESCRIBED_STATUS),
                "job": expression(described_job(with_name=True)),
            },
            outputs={},
        )
        describe_training_job.add_retry(
            errors=[SAGEMAKER_ERROR], interval=Duration.seconds(2), backoff_rate=2, max_attempts=6
        )
        status = "$described.status"
        classify_training_job = (
            sfn.Choice.jsonata(self, "ClassifyTrainingJob")
            .when(
                sfn.Condition.jsonata(expression(f'{status} = "Completed"')),
                report,
                assign={"outcome": _outcome("Completed")},
            )
            .when(
                sfn.Condition.jsonata(expression(f'{status} = "Failed"')),
                report,
                assign={
                    "outcome": _outcome("Failed", FAILED_JOB_CAUSE)
                },
            )
            .otherwise(
                sfn.Pass.jsonata(
                    self,
                    "TrainingJobStopped",
                    assign={
                        "outcome": _outcome(
                            "Stopped",
                            '"Training job " & $job.name & " was stopped (" & $described.secondary & "): " & '
                            "$service.reason",
                        )
                    },
                ).next(report)
            )
        )
        describe_training_job.next(classify_training_job)

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
                    "outcome": _outcome(
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
                describe_training_job,
            )
            .when(
                sfn.Condition.jsonata(
                    expression(
                        f'{service_status} = "FAILED" and $contains({reason}, "ResourceLimitExceeded")'
                    )
                ),
                report,
                assign={
                    "outcome": _outcome(
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
                    "outcome": _outcome("Rejected", '"SageMaker rejected the request: " & $service.reason')
                },
            )
            .when(
                sfn.Condition.jsonata(expression(f'{service_status} = "FAILED"')),
                report,
                assign={
                    "outcome": _outcome(
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
