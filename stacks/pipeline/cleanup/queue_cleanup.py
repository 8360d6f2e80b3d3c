"""Queue mode's part of the job cleanup: service jobs still waiting in the queue have no training job to
stop yet (the job cleanup stops training jobs), so an execution that ended unsuccessfully must also
take its service jobs out of the queue. QueueCleanup builds two JSONata state machines:

- `<project>-queue-cleanup`, started by an EventBridge rule when a pipeline execution fails, times out or
  is aborted (the same events as the job cleanup), with the event as input;
- `<project>-queue-sweeper`, every 15 minutes, for a missed event or a failed cleanup.

- `terminate_run_service_jobs`: the cleanup machine knows the ended execution's run name; the run's service
  jobs are named `<queue key><run key>-<attempt>` (queue_settings.service_job_name): list them by name
  and terminate those Batch has not finished whose `trainstack:execution` tag is the ended execution. The
  name alone is not the run's identity: an execution given a run name another execution holds fails
  (InvalidInput, or NameInUse from the name claim: queue/run_names.py) and must not take that run's jobs
  down. Batch stops the training job of a service job it already started.
- `terminate_orphaned_service_jobs`: the sweeper lists the queue's RUNNABLE jobs and terminates those whose
  `trainstack:namespace` tag is this pipeline's project and whose `trainstack:execution` tag names an
  execution of this pipeline that is no longer RUNNING.

Both read a job's tags with DescribeServiceJob, whose answer carries `tags` (botocore's batch model,
DescribeServiceJobResponse.tags); ListServiceJobs' summaries carry none.

Both walk every page of ListServiceJobs (`each_service_job`).
"""

from __future__ import annotations

import json
from typing import Any

from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.pipeline.jsonata_text import expression
from stacks.pipeline.logged_state_machine import logged_state_machine
from stacks.pipeline.machine_kit import (
    BATCH_CLIENT_ERROR,
    BATCH_TRANSIENT_ERRORS,
    STEP_FUNCTIONS_ERROR,
    SWEEP_TIMEOUT,
    describe_service_job,
    execution_prefix,
    retry_must_succeed_call,
    start_every_sweep,
    start_when_execution_ended,
)
from stacks.pipeline.queue.training_queue import TrainingQueue, run_job_prefix_of
from stacks.pipeline.team_access import only_own_service_jobs
from stacks.validation import acknowledge
from trainstack.job_request import EXECUTION_TAG, NAMESPACE_TAG

# Service job states Batch has not finished (DescribeServiceJob's enum minus SUCCEEDED and FAILED).
UNFINISHED = ("SUBMITTED", "PENDING", "RUNNABLE", "SCHEDULED", "STARTING", "RUNNING")


def _retry(task: sfn.TaskStateBase) -> sfn.TaskStateBase:
    retry_must_succeed_call(task, BATCH_TRANSIENT_ERRORS)
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
    terminate.add_catch(sfn.Succeed.jsonata(scope, f"{construct_id}Gone"), errors=[BATCH_CLIENT_ERROR])
    return terminate


def each_service_job(
    scope: Construct,
    name: str,
    *,
    job_queue_arn: str,
    filters: dict[str, Any],
    select: str,
    processor: sfn.IChainable,
    done: sfn.IChainable,
    assign: dict[str, Any] | None = None,
) -> sfn.TaskStateBase:
    """The first state of: list the queue's service jobs page by page (ListServiceJobs answers at most 100
    and a nextToken), run `processor` on the id of each job `select` (a JSONata predicate on a job
    summary) picks, then `done`. `name` names the states (Find<name>, FindMore<name>, Each<name>)."""
    page = {
        "ids": expression(f"[$states.result.JobSummaryList[{select}].JobId]"),
        "nextToken": expression("$exists($states.result.NextToken) ? $states.result.NextToken : ''"),
    }
    parameters = {"JobQueue": job_queue_arn, **filters}

    def find(construct_id: str, more: dict[str, Any], extra: dict[str, Any]) -> sfn.TaskStateBase:
        return _retry(
            tasks.CallAwsService.jsonata(
                scope,
                construct_id,
                service="batch",
                action="listServiceJobs",
                parameters={**parameters, **more},
                iam_resources=["*"],
                assign={**extra, **page},
                outputs={},
            )
        )

    first = find(f"Find{name}", {}, assign or {})
    following = find(f"FindMore{name}", {"NextToken": expression("$nextToken")}, {})
    each = sfn.Map.jsonata(
        scope,
        f"Each{name}",
        items=sfn.ProvideItems.jsonata(expression("$ids")),
        max_concurrency=5,
        outputs={},
    )
    each.item_processor(processor)
    more = sfn.Choice.jsonata(scope, f"More{name}")
    first.next(each)
    following.next(each)
    each.next(more.when(sfn.Condition.jsonata(expression("$nextToken != ''")), following).otherwise(done))
    return first


def terminate_run_service_jobs(
    scope: Construct,
    *,
    job_queue_arn: str,
    queue_name: str,
    service_job_arn: str,
    run_name: str,
    execution_arn: str,
    done: sfn.IChainable,
) -> sfn.TaskStateBase:
    """First state: terminate the unfinished service jobs of the ended execution's run (`<prefix><attempt>`,
    prefix run_job_prefix_of) that carry its ARN in their execution tag, then `done`. run_name and
    execution_arn are JSONata expressions."""
    prefix = f"({run_job_prefix_of(queue_name, f'({run_name})')})"
    ours = (
        f"$substring(JobName, 0, $length({prefix})) = {prefix} and "
        f"$exists($match($substring(JobName, $length({prefix})), /^[0-9]+$/))"
    )
    of_execution = (
        sfn.Choice.jsonata(scope, "IsJobOfEndedExecution")
        .when(
            sfn.Condition.jsonata(expression("$owner = $endedExecution")),
            _terminate(
                scope,
                "TerminateQueuedJob",
                "$jobId",
                "'trainstack cleanup: execution ' & $endedExecution & ' ended'",
                service_job_arn,
            ),
        )
        .otherwise(sfn.Succeed.jsonata(scope, "OtherExecutionsJob"))
    )
    return each_service_job(
        scope,
        "QueuedJobs",
        job_queue_arn=job_queue_arn,
        # ListServiceJobs' JOB_NAME filter takes a prefix.
        filters={"Filters": [{"Name": "JOB_NAME", "Values": [expression(f"{prefix} & '*'")]}]},
        select=f"({ours}) and Status in {json.dumps(UNFINISHED)}",
        assign={"endedExecution": expression(execution_arn)},
        processor=_read_service_job(scope, "ReadQueuedJob").next(of_execution),
        done=done,
    )


def _tag(name: str) -> str:
    """JSONata: tag `name` of the described job, null when it has none (AWS fails a state whose expression
    evaluates to nothing: States.QueryEvaluationError)."""
    return f'($t := $lookup($states.result.Tags, {json.dumps(name)}); $type($t) = "string" ? $t : null)'


def _read_service_job(scope: Construct, construct_id: str) -> sfn.TaskStateBase:
    """DescribeServiceJob of a listed job: its id, and the execution and namespace its tags name."""
    read = _retry(
        describe_service_job(
            scope,
            construct_id,
            "$states.input",
            {
                "jobId": expression("$states.result.JobId"),
                "owner": expression(_tag(EXECUTION_TAG)),
                "namespace": expression(_tag(NAMESPACE_TAG)),
            },
        )
    )
    # The job was removed meanwhile: nothing left to do.
    read.add_catch(sfn.Succeed.jsonata(scope, f"{construct_id}Gone"), errors=[BATCH_CLIENT_ERROR])
    return read


def _read_owner_execution(scope: Construct, executions_arn: str) -> sfn.TaskStateBase:
    read_owner = tasks.CallAwsService.jsonata(
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
    retry_must_succeed_call(read_owner, [STEP_FUNCTIONS_ERROR])
    return read_owner


def terminate_orphaned_service_jobs(
    scope: Construct,
    *,
    job_queue_arn: str,
    service_job_arn: str,
    namespace: str,
    execution_prefix: str,
    executions_arn: str,
    done: sfn.IChainable,
) -> sfn.TaskStateBase:
    """First state: terminate RUNNABLE service jobs whose pipeline execution is not RUNNING, then `done`.
    A job without this pipeline's namespace tag (`namespace`: its project) and execution tag (another
    project's or team's, or one submitted by hand) is left alone."""
    describe = _read_service_job(scope, "ReadWaitingJob")
    not_ours = sfn.Succeed.jsonata(scope, "NotThisPipelinesJob")
    owner_running = sfn.Succeed.jsonata(scope, "ExecutionStillRunning")
    read_owner = _read_owner_execution(scope, executions_arn)
    is_ours = (
        sfn.Choice.jsonata(scope, "IsJobOfThisPipeline")
        .when(
            sfn.Condition.jsonata(
                expression(
                    f"($prefix := {json.dumps(execution_prefix)}; $namespace = {json.dumps(namespace)} and "
                    "($owner != null ? $substring($owner, 0, $length($prefix)) = $prefix : false))"
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
    return each_service_job(
        scope,
        "WaitingJobs",
        job_queue_arn=job_queue_arn,
        filters={"JobStatus": "RUNNABLE"},
        select="true",
        processor=describe.next(is_ours),
        done=done,
    )


def run_name_of_event(project: str) -> str:
    """The ended execution's run name from its status-change event: the input's runName, else the
    pipeline's default `<project>-<execution name>` (as the pipeline's input check sets it)."""
    return (
        "($given := $parse($states.input.detail.input).runName; "
        f'$type($given) = "string" ? $given : {json.dumps(project + "-")} & $states.input.detail.name)'
    )


class QueueCleanup(Construct):
    """The queue cleanup machine and its rule, and the queue sweeper machine and its schedule."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        project: str,
        pipeline: sfn.StateMachine,
        queue: TrainingQueue,
    ) -> None:
        super().__init__(scope, construct_id)
        executions = execution_prefix(self, pipeline)
        first = terminate_run_service_jobs(
            self,
            job_queue_arn=queue.job_queue_arn,
            queue_name=queue.queue_name,
            service_job_arn=queue.service_job_arn,
            run_name=run_name_of_event(project),
            execution_arn="$states.input.detail.executionArn",
            done=sfn.Succeed.jsonata(self, "Cleaned"),
        )
        self.state_machine = self._machine(f"{project}-queue-cleanup", "Cleanup", first, queue)
        self.rule = start_when_execution_ended(
            self,
            self.state_machine,
            pipeline,
            f"Take the queued jobs of {project} pipeline executions that ended unsuccessfully "
            "out of the queue",
        )
        first = terminate_orphaned_service_jobs(
            self,
            job_queue_arn=queue.job_queue_arn,
            service_job_arn=queue.service_job_arn,
            namespace=project,
            execution_prefix=executions,
            executions_arn=f"{executions}*",
            done=sfn.Succeed.jsonata(self, "Swept"),
        )
        self.sweeper = self._machine(f"{project}-queue-sweeper", "Sweeper", first, queue)
        for machine in (self.state_machine, self.sweeper):
            only_own_service_jobs(machine.role, queue.service_job_arn, project)
        self.schedule = start_every_sweep(
            self,
            self.sweeper,
            f"Terminate queued {project} jobs whose pipeline execution is no longer running",
        )
        acknowledge(
            self.sweeper.role,
            f"AwsSolutions-IAM5[Resource::{executions}*]",
            "The owners of waiting jobs are found at run time; all are executions of the pipeline.",
        )

    def _machine(self, name: str, construct_id: str, chain: sfn.IChainable, queue: TrainingQueue):
        machine, _ = logged_state_machine(self, construct_id, name=name, chain=chain, timeout=SWEEP_TIMEOUT)
        acknowledge(
            machine.role,
            "AwsSolutions-IAM5[Resource::*]",
            "batch:ListServiceJobs, batch:DescribeServiceJob and the CloudWatch Logs delivery and X-Ray "
            "actions support no "
            "resource-level permissions.",
        )
        acknowledge(
            machine.role,
            f"AwsSolutions-IAM5[Resource::{queue.service_job_arn}]",
            "Service job ids are chosen by Batch; the jobs to terminate are found in this project's queue.",
        )
        return machine
