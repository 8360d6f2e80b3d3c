"""Queue mode's part of the job cleanup: service jobs still waiting in the queue have no training job to
stop yet, so an execution that ended unsuccessfully must also take its service jobs out of the queue.

- `terminate_run_service_jobs`: the cleanup machine knows the ended execution's run name; the run's service
  jobs are named `<runName>-<attempt>` (like its training jobs): list them by name and terminate those
  Batch has not finished. Batch stops the training job of a service job it already started.
- `terminate_orphaned_service_jobs`: the sweeper lists the queue's RUNNABLE jobs and terminates those whose
  `trainstack:execution` tag names an execution of this pipeline that is no longer RUNNING.
"""

from __future__ import annotations

import json

from aws_cdk import Duration
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.queued_training_attempt import CLIENT_ERROR, TRANSIENT_ERRORS, expression
from trainstack.job_request import EXECUTION_TAG

# Service job states Batch has not finished (DescribeServiceJob's enum minus SUCCEEDED and FAILED).
UNFINISHED = ("SUBMITTED", "PENDING", "RUNNABLE", "SCHEDULED", "STARTING", "RUNNING")


def _retry(task: sfn.TaskStateBase) -> sfn.TaskStateBase:
    task.add_retry(
        errors=TRANSIENT_ERRORS,
        interval=Duration.seconds(2),
        backoff_rate=2,
        max_attempts=8,
        max_delay=Duration.seconds(60),
        jitter_strategy=sfn.JitterType.FULL,
    )
    return task


def _terminate(
    scope: Construct, construct_id: str, job_id: str, reason: str, service_job_arn: str
) -> sfn.IChainable:
    terminate = _retry(
        tasks.CallAwsService.jsonata(
            scope,
            construct_id,
            service="batch",
            action="terminateServiceJob",
            parameters={"JobId": expression(job_id), "Reason": expression(reason)},
            iam_resources=[service_job_arn],
        )
    )
    # The job ended (or was removed) meanwhile: nothing left to do.
    terminate.add_catch(sfn.Succeed.jsonata(scope, f"{construct_id}Gone"), errors=[CLIENT_ERROR])
    return terminate


def terminate_run_service_jobs(
    scope: Construct, *, job_queue_arn: str, service_job_arn: str, run_name: str, execution_arn: str
) -> tuple[sfn.TaskStateBase, sfn.Map]:
    """(first, last) states: terminate the unfinished service jobs `<runName>-<attempt>` of the ended
    execution. run_name and execution_arn are JSONata expressions."""
    run = f"({run_name})"
    ours = (
        f"JobName = {run} or ($substring(JobName, 0, $length({run}) + 1) = {run} & '-' and "
        f"$exists($match($substring(JobName, $length({run}) + 1), /^[0-9]+$/)))"
    )
    find = _retry(
        tasks.CallAwsService.jsonata(
            scope,
            "FindQueuedJobs",
            comment="The run's service jobs by name (ListServiceJobs' JOB_NAME filter takes a prefix).",
            service="batch",
            action="listServiceJobs",
            parameters={
                "JobQueue": job_queue_arn,
                "Filters": [{"Name": "JOB_NAME", "Values": [expression(f"{run} & '-*'")]}],
            },
            iam_resources=["*"],
            assign={
                "queuedJobs": expression(
                    f"[$states.result.JobSummaryList[({ours}) and Status in {json.dumps(UNFINISHED)}].JobId]"
                )
            },
            outputs={},
        )
    )
    terminate_each = sfn.Map.jsonata(
        scope,
        "TerminateQueuedJobs",
        items=sfn.ProvideItems.jsonata(expression("$queuedJobs")),
        max_concurrency=5,
        outputs={},
    )
    terminate_each.item_processor(
        _terminate(
            scope,
            "TerminateQueuedJob",
            "$states.input",
            f"'trainstack cleanup: execution ' & ({execution_arn}) & ' ended'",
            service_job_arn,
        )
    )
    find.next(terminate_each)
    return find, terminate_each


def terminate_orphaned_service_jobs(
    scope: Construct, *, job_queue_arn: str, service_job_arn: str, execution_prefix: str, executions_arn: str
) -> tuple[sfn.TaskStateBase, sfn.Map]:
    """(first, last) states: terminate RUNNABLE service jobs whose pipeline execution is not RUNNING."""
    find = _retry(
        tasks.CallAwsService.jsonata(
            scope,
            "FindWaitingJobs",
            service="batch",
            action="listServiceJobs",
            parameters={"JobQueue": job_queue_arn, "JobStatus": "RUNNABLE"},
            iam_resources=["*"],
            assign={"waitingJobs": expression("[$states.result.JobSummaryList.JobId]")},
            outputs={},
        )
    )
    check_each = sfn.Map.jsonata(
        scope,
        "CheckWaitingJobs",
        items=sfn.ProvideItems.jsonata(expression("$waitingJobs")),
        max_concurrency=5,
        outputs={},
    )
    describe = _retry(
        tasks.CallAwsService.jsonata(
            scope,
            "ReadWaitingJob",
            service="batch",
            action="describeServiceJob",
            parameters={"JobId": expression("$states.input")},
            iam_resources=[service_job_arn],
            assign={
                "jobId": expression("$states.result.JobId"),
                "owner": expression(f"$lookup($states.result.Tags, {json.dumps(EXECUTION_TAG)})"),
            },
            outputs={},
        )
    )
    not_ours = sfn.Succeed.jsonata(scope, "NotThisPipelinesJob")
    owner_running = sfn.Succeed.jsonata(scope, "ExecutionStillRunning")
    read_owner = _retry(
        tasks.CallAwsService.jsonata(
            scope,
            "ReadOwnerExecution",
            service="sfn",
            action="describeExecution",
            parameters={"ExecutionArn": expression("$owner")},
            iam_resources=[executions_arn],
            iam_action="states:DescribeExecution",
            assign={"ownerStatus": expression("$states.result.Status")},
            outputs={},
        )
    )
    is_ours = (
        sfn.Choice.jsonata(scope, "IsJobOfThisPipeline")
        .when(
            sfn.Condition.jsonata(
                expression(
                    f"($prefix := {json.dumps(execution_prefix)}; "
                    "$exists($owner) and $substring($owner, 0, $length($prefix)) = $prefix)"
                )
            ),
            read_owner,
        )
        .otherwise(not_ours)
    )
    orphaned = (
        sfn.Choice.jsonata(scope, "IsOwnerRunning")
        .when(sfn.Condition.jsonata(expression('$ownerStatus = "RUNNING"')), owner_running)
        .otherwise(
            _terminate(
                scope,
                "TerminateOrphanedJob",
                "$jobId",
                "'trainstack sweeper: execution ' & $owner & ' is ' & $ownerStatus",
                service_job_arn,
            )
        )
    )
    read_owner.next(orphaned)
    check_each.item_processor(describe.next(is_ours))
    find.next(check_each)
    return find, check_each
