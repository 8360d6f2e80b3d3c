"""No orphaned jobs: two JSONata state machines stop the training jobs of pipeline executions that ended.

1. `<project>-job-cleanup`, started by an EventBridge rule when a pipeline execution fails, times out or
   is aborted. Job names are deterministic (`<runName>-<attempt>`), so it does not search for the jobs
   (SageMaker's Search index lags behind CreateTrainingJob): it reads the execution's run name, waits out
   a CreateTrainingJob that may still have been in flight when the execution ended, then describes
   `<runName>-1`, `<runName>-2`, ... until a name does not exist, and stops each InProgress job whose
   `trainstack:execution` tag names that execution.
2. `<project>-job-sweeper`, every 15 minutes: stops any InProgress job tagged with this pipeline's
   namespace (`trainstack:namespace` = the project) and an execution of this pipeline that is no longer
   RUNNING (a missed event, a cleanup that failed). In queue mode that includes
   the training jobs AWS Batch named itself (`AWSBatch<queue key>*`), found by the request's tags, which
   are assumed to reach them (docs/iam.md); the queue cleanup does not depend on that.

Errors are AWS's aws-sdk names: SageMaker throttling (and validation) arrives as
`SageMaker.SageMakerException` with the reason in the Cause; every call is retried with capped,
jittered backoff, and a DescribeTrainingJob failure is classified by its Cause (throttled: back off;
not found: the walk is over; anything else: the cleanup fails, loudly).
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.pipeline.jsonata_text import expression, literal
from stacks.pipeline.logged_state_machine import logged_state_machine
from stacks.pipeline.machine_kit import (
    EXECUTION_GONE_ERROR,
    NOT_FOUND_CAUSE,
    RUN_NAME_MAX_LENGTH,
    SAGEMAKER_ERROR,
    SAGEMAKER_NOT_FOUND_ERROR,
    STEP_FUNCTIONS_ERROR,
    SWEEP_TIMEOUT,
    THROTTLE_CAUSE,
    execution_prefix,
    retry_must_succeed_call,
    start_every_sweep,
    start_when_execution_ended,
    training_job_arn,
)
from stacks.pipeline.queue.training_queue import batch_training_jobs
from stacks.validation import acknowledge
from stacks.wildcard_acknowledgments import acknowledge_wildcard_statements, flatten_reference
from trainstack.job_request import EXECUTION_TAG, NAMESPACE_TAG

# Longer than a CreateTrainingJob call can stay in flight (the SDK's 60 s socket timeout plus retries).
IN_FLIGHT_CREATE_SECONDS = 120
STOP_BATCH_JOBS = "StopBatchTrainingJobs"
# Throttled DescribeTrainingJob calls of one job before the cleanup gives up (about 10 minutes).
MAX_THROTTLED_DESCRIBES = 12
# The job of each attempt of the run, as the pipeline names it.
ATTEMPT_JOB_NAME = "$runName & '-' & $string($attempt)"


class JobCleanup(Construct):
    """The cleanup machine and its rule, and the sweeper machine and its schedule."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        project: str,
        pipeline: sfn.StateMachine,
        batch_queue_name: str | None = None,
    ) -> None:
        """batch_queue_name: queue mode's queue, whose jobs AWS Batch names itself (the sweeper may stop
        those)."""
        super().__init__(scope, construct_id)
        self._project = project
        self._job_arns = training_job_arn(self, f"{project}-*")
        self._execution_prefix = execution_prefix(self, pipeline)
        self._executions = f"{self._execution_prefix}*"
        self.state_machine = self._machine(
            "StateMachine", f"{project}-job-cleanup", self._stop_by_name(), timeout=cdk.Duration.hours(2)
        )
        self.rule = start_when_execution_ended(
            self,
            self.state_machine,
            pipeline,
            f"Stop the jobs of {project} pipeline executions that failed, timed out, aborted",
        )
        self.sweeper = self._machine(
            "Sweeper", f"{project}-job-sweeper", self._sweep(), timeout=SWEEP_TIMEOUT
        )
        self.schedule = start_every_sweep(
            self,
            self.sweeper,
            f"Stop InProgress {project} jobs whose pipeline execution is no longer running",
        )
        if batch_queue_name is not None:
            self.sweeper.add_to_role_policy(
                batch_training_jobs(self, batch_queue_name, STOP_BATCH_JOBS, ["sagemaker:StopTrainingJob"])
            )
            acknowledge_wildcard_statements(
                self.sweeper.role,
                {
                    STOP_BATCH_JOBS: "Batch names the training jobs it starts AWSBatch<jobName><attemptId> "
                    "at run time; every jobName we submit starts with this queue's key, which keeps them to "
                    "this project's runs."
                },
            )

    def _machine(self, construct_id: str, name: str, chain: sfn.IChainable, *, timeout: cdk.Duration):
        machine, _ = logged_state_machine(self, construct_id, name=name, chain=chain, timeout=timeout)
        self._acknowledge_wildcards(machine.role)
        return machine

    def _acknowledge_wildcards(self, role: iam.IRole) -> None:
        acknowledge(
            role,
            "AwsSolutions-IAM5[Resource::*]",
            "sagemaker:Search and the CloudWatch Logs delivery and X-Ray actions support no resource-level "
            "permissions.",
        )
        for resource, reason in (
            (
                self._job_arns,
                "The jobs are found at run time; the project's job name prefix is the narrowest fixed scope.",
            ),
            (self._executions, "The executions are found at run time; all are the pipeline's."),
        ):
            finding = flatten_reference(cdk.Stack.of(self).resolve(resource))
            acknowledge(role, f"AwsSolutions-IAM5[Resource::{finding}]", reason)

    def _sagemaker(
        self, construct_id: str, action: str, parameters: dict[str, Any], **kwargs
    ) -> tasks.CallAwsService:
        return tasks.CallAwsService.jsonata(
            self,
            construct_id,
            service="sagemaker",
            action=action,
            parameters=parameters,
            iam_resources=["*"] if action == "search" else [self._job_arns],
            iam_action=f"sagemaker:{action[0].upper()}{action[1:]}",
            **kwargs,
        )

    def _describe_execution(self, construct_id: str, execution_arn: str, **kwargs) -> tasks.CallAwsService:
        task = tasks.CallAwsService.jsonata(
            self,
            construct_id,
            service="sfn",
            action="describeExecution",
            parameters={"ExecutionArn": expression(execution_arn)},
            iam_resources=[self._executions],
            iam_action="states:DescribeExecution",
            **kwargs,
        )
        retry_must_succeed_call(task, [STEP_FUNCTIONS_ERROR])
        return task

    # ------------------------------------------------------------ stop by name

    def _stop_by_name(self) -> sfn.IChainable:
        """Input: the EventBridge event (`detail.executionArn`). Output: {"stopped": [job names]}."""
        done = sfn.Succeed.jsonata(self, "Done", outputs={"stopped": expression("$stopped")})
        why_describe_failed = sfn.Choice.jsonata(self, "WhyDescribeFailed")
        read_execution = self._read_execution(done)
        describe = self._describe_job(done, why_describe_failed)
        read_tags = self._read_job_tags()
        stop = self._stop_job(describe)
        next_attempt = sfn.Pass.jsonata(
            self, "NextAttempt", assign={"attempt": expression("$attempt + 1"), "throttles": 0}
        )
        could_jobs_exist = self._could_jobs_exist(describe, done)
        in_progress = sfn.Choice.jsonata(self, "IsJobInProgress")
        of_execution = sfn.Choice.jsonata(self, "IsJobOfExecution")

        describe.next(
            in_progress.when(
                sfn.Condition.jsonata(expression("$job.status = 'InProgress'")),
                read_tags.next(
                    of_execution.when(
                        sfn.Condition.jsonata(expression("$owned")), stop.next(next_attempt)
                    ).otherwise(next_attempt)
                ),
            ).otherwise(next_attempt)
        )
        next_attempt.next(describe)
        self._classify_describe_error(why_describe_failed, describe, done)
        return read_execution.next(could_jobs_exist)

    def _read_execution(self, done: sfn.IChainable) -> tasks.CallAwsService:
        read_execution = self._describe_execution(
            "ReadExecution",
            "$states.input.detail.executionArn",
            assign={
                "executionArn": expression("$states.result.ExecutionArn"),
                # The pipeline's rule: runName from the input, else <project>-<execution name>.
                "runName": expression(
                    f"($given := $parse($states.result.Input).runName; $type($given) = 'string' ? $given : "
                    f"{literal(self._project + '-')} & $states.result.Name)"
                ),
                "attempt": 1,
                "throttles": 0,
                "stopped": expression("[]"),
            },
        )
        # No such execution: no job of it to stop.
        read_execution.add_catch(done, errors=[EXECUTION_GONE_ERROR], assign={"stopped": expression("[]")})
        return read_execution

    def _describe_job(self, done: sfn.IChainable, why_failed: sfn.IChainable) -> tasks.CallAwsService:
        """DescribeTrainingJob of `<runName>-<attempt>`; not found: the walk is over."""
        describe = self._sagemaker(
            "DescribeJob",
            "describeTrainingJob",
            {"TrainingJobName": expression(ATTEMPT_JOB_NAME)},
            assign={
                "job": expression(
                    "{'name': $states.result.TrainingJobName, 'arn': $states.result.TrainingJobArn, "
                    "'status': $states.result.TrainingJobStatus}"
                )
            },
        )
        describe.add_catch(done, errors=[SAGEMAKER_NOT_FOUND_ERROR])
        describe.add_catch(
            why_failed, errors=[SAGEMAKER_ERROR], assign={"error": expression("$states.errorOutput")}
        )
        return describe

    def _read_job_tags(self) -> tasks.CallAwsService:
        read_tags = self._sagemaker(
            "ReadJobTags",
            "listTags",
            {"ResourceArn": expression("$job.arn")},
            assign={
                "owned": expression(
                    f"$executionArn in $states.result.Tags[Key = {literal(EXECUTION_TAG)}].Value"
                )
            },
        )
        retry_must_succeed_call(read_tags, [SAGEMAKER_ERROR])
        return read_tags

    def _stop_job(self, describe: sfn.IChainable) -> tasks.CallAwsService:
        stop = self._sagemaker(
            "StopJob",
            "stopTrainingJob",
            {"TrainingJobName": expression("$job.name")},
            assign={"stopped": expression("$append($stopped, $job.name)")},
        )
        retry_must_succeed_call(stop, [SAGEMAKER_ERROR])
        # The job ended between describe and stop (SageMaker: not in progress): look at it again.
        stop.add_catch(describe, errors=[SAGEMAKER_ERROR])
        return stop

    def _could_jobs_exist(self, describe: sfn.IChainable, done: sfn.IChainable) -> sfn.Choice:
        """A run name the pipeline could have given: wait out an in-flight create, then walk its jobs."""
        settle = sfn.Wait.jsonata(
            self,
            "WaitOutInFlightCreate",
            time=sfn.WaitTime.duration(cdk.Duration.seconds(IN_FLIGHT_CREATE_SECONDS)),
        )
        possible_run_name = (
            f"$length($runName) <= {RUN_NAME_MAX_LENGTH} and "
            f"$contains($runName, /^{self._project}-[a-zA-Z0-9](-*[a-zA-Z0-9])*$/)"
        )
        return (
            sfn.Choice.jsonata(self, "CouldJobsExist")
            .when(sfn.Condition.jsonata(expression(possible_run_name)), settle.next(describe))
            .otherwise(done)
        )

    def _classify_describe_error(
        self, why_failed: sfn.Choice, describe: sfn.IChainable, done: sfn.IChainable
    ) -> None:
        """Throttled: back off and describe again; not found: the walk is over; else the cleanup fails."""
        back_off = sfn.Wait.jsonata(
            self,
            "BackOffThrottled",
            # 5 s doubling to 60 s, plus up to 50 % jitter.
            time=sfn.WaitTime.seconds(
                expression("$round($min([60, 5 * $power(2, $throttles)]) * (1 + $random() / 2))")
            ),
            assign={"throttles": expression("$throttles + 1")},
        )
        give_up = sfn.Fail.jsonata(
            self,
            "CleanupFailed",
            error="CleanupFailed",
            cause=expression(
                f"'Could not tell whether training job ' & {ATTEMPT_JOB_NAME} & ' exists: ' & $error.Cause"
            ),
        )
        throttled = f"$contains($error.Cause, {THROTTLE_CAUSE}) and $throttles < {MAX_THROTTLED_DESCRIBES}"
        why_failed.when(sfn.Condition.jsonata(expression(throttled)), back_off.next(describe)).when(
            sfn.Condition.jsonata(expression(f"$contains($error.Cause, {NOT_FOUND_CAUSE})")), done
        ).otherwise(give_up)

    # ------------------------------------------------------------ sweeper

    def _sweep(self) -> sfn.IChainable:
        """Input: the scheduled event (ignored). Output: {"stopped": [job names]}."""
        find, find_more = self._find_running_jobs()
        check = self._check_jobs()
        more = sfn.Choice.jsonata(self, "MorePages")
        done = sfn.Succeed.jsonata(self, "SweepDone", outputs={"stopped": expression("$stopped")})
        find.next(check)
        find_more.next(check)
        check.next(
            more.when(sfn.Condition.jsonata(expression("$nextToken != ''")), find_more).otherwise(done)
        )
        return find

    def _find_running_jobs(self) -> tuple[tasks.CallAwsService, tasks.CallAwsService]:
        """The first page and each following page of InProgress jobs tagged with an execution and this
        pipeline's namespace."""
        execution = f"Tags[Key = {literal(EXECUTION_TAG)}].Value"
        found = {
            # Jobs of this pipeline's executions only (other pipelines may use the same tag key).
            "jobs": expression(
                f"($prefix := {literal(self._execution_prefix)}; "
                f"[$states.result.Results.TrainingJob[$substring({execution}, 0, $length($prefix)) = $prefix]"
                f".{{'name': TrainingJobName, 'execution': {execution}}}])"
            ),
            "nextToken": expression("$exists($states.result.NextToken) ? $states.result.NextToken : ''"),
        }
        search = {
            "Resource": "TrainingJob",
            "MaxResults": 100,
            "SearchExpression": {
                "Filters": [
                    {"Name": "TrainingJobStatus", "Operator": "Equals", "Value": "InProgress"},
                    {"Name": f"Tags.{EXECUTION_TAG}", "Operator": "Exists"},
                    {"Name": f"Tags.{NAMESPACE_TAG}", "Operator": "Equals", "Value": self._project},
                ]
            },
        }
        find = self._sagemaker(
            "FindRunningJobs", "search", search, assign={"stopped": expression("[]"), **found}
        )
        find_more = self._sagemaker(
            "FindMoreRunningJobs", "search", {**search, "NextToken": expression("$nextToken")}, assign=found
        )
        for task in (find, find_more):
            retry_must_succeed_call(task, [SAGEMAKER_ERROR])
        return find, find_more

    def _check_jobs(self) -> sfn.Map:
        """Each job of a page: stopped unless its execution is still RUNNING; output the stopped names."""
        check = sfn.Map.jsonata(
            self,
            "CheckJobs",
            items=sfn.ProvideItems.jsonata(expression("$jobs")),
            max_concurrency=2,
            assign={
                "stopped": expression(
                    "$append($stopped, $filter($states.result, function($v) {$type($v) = 'string'}))"
                )
            },
        )
        describe = self._describe_execution(
            "ReadJobExecution",
            "$states.input.execution",
            assign={"job": expression("$states.input")},
            outputs=expression("$states.result.Status"),
        )
        keep = sfn.Pass.jsonata(self, "LeaveJob", outputs=expression("null"))
        stop = self._sagemaker(
            "StopOrphan",
            "stopTrainingJob",
            {"TrainingJobName": expression("$job.name")},
            outputs=expression("$job.name"),
        )
        retry_must_succeed_call(stop, [SAGEMAKER_ERROR])
        stop.add_catch(keep, errors=[SAGEMAKER_ERROR])  # ended in between
        describe.add_catch(stop, errors=[EXECUTION_GONE_ERROR], assign={"job": expression("$states.input")})
        still_running = sfn.Choice.jsonata(self, "IsExecutionRunning")
        check.item_processor(
            describe.next(
                still_running.when(
                    sfn.Condition.jsonata(expression("$states.input = 'RUNNING'")), keep
                ).otherwise(stop)
            )
        )
        return check
