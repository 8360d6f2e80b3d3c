"""Queue mode's attempt: the same CreateTrainingJob request, submitted to the AWS Batch job queue.

Same contract as the direct attempt (attempt/training_attempt.py), so the pipeline runs either one:
input {"request", "runName", "stopAtMillis", "timeLimitSeconds", "throttles"} plus "priority" and
"share" (null when not used); output {"status", "cause", "job"}, status one of the attempt statuses. The
first state checks the request, the share and the priority against what the profiles and the queue allow
(request_guard.py): anything else ends the execution with the error RequestRefused before any
SubmitServiceJob.

Batch holds the job RUNNABLE until the service environment has room, starts the training job
(SCHEDULED, STARTING, RUNNING) and re-submits it by itself after capacity errors until it runs or has
waited the queue's capacity time limit. So this attempt (its service job states in service_job_states.py;
here the run-name claim, the guard, the training job Batch started and its lineage):
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

from stacks.pipeline.attempt.batch_training_jobs import count_earlier_training_jobs, training_job_name
from stacks.pipeline.attempt.service_job_states import (
    HAS_INSTANCES,
    check_service_job,
    poll_service_job,
    submit_service_job,
    terminate_over_budget_service_job,
    terminate_overdue_service_job,
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
from stacks.pipeline.cost_cap_states import add_attempt_budget_stop, poll_within_budget
from stacks.pipeline.jsonata_text import expression
from stacks.pipeline.machine_kit import SAGEMAKER_ERROR
from stacks.pipeline.queue.run_names import RunNameTable, claim_run_name, name_in_use_cause
from stacks.pipeline.request_guard import queued_fields_problem, refuse_unless_allowed, request_problem
from trainstack.job_request import EXECUTION_TAG
from trainstack.profiles import Profile
from trainstack.queue_settings import QueueSettings


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
        submit = submit_service_job(self, partition, job_queue_arn, queue_name, report)
        wait = poll_wait(self, "WaitForServiceJob", bound=poll_within_budget)
        describe = poll_service_job(self, wait)
        terminate = terminate_overdue_service_job(self, service_job_arn, wait, report)
        describe_started_job = self._describe_started_training_job(
            job_arns,
            batch_job_permissions,
            wait,
            report,
            terminate_over_budget_service_job(self, service_job_arn, wait),
        )
        check = check_service_job(self, report, describe_started_job, terminate, wait)
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
