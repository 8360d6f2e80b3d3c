"""What every state machine of the pipeline shares: AWS's error and cause names, the retry policies by
purpose, and the name limits the input check defines. The JSONata helpers are in jsonata_text.

Error names under aws-sdk:<service>:* integrations: errors a service's API model declares are
`<Service>.<Code>Exception`; every other one, throttling and validation included, is
`<Service>.<Service>Exception` with the code and message only in the Cause (Step Functions developer guide,
"Handling errors in AWS SDK service integrations").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import aws_cdk as cdk
from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.pipeline.jsonata_text import expression
from trainstack.run_names import RUN_NAME_MAX_LENGTH

# Re-exported: the machines take the run-name limit from where the input check defines it.
__all__ = ["RUN_NAME_MAX_LENGTH"]

SAGEMAKER_ERROR = "SageMaker.SageMakerException"
SAGEMAKER_QUOTA_ERROR = "SageMaker.ResourceLimitExceededException"
SAGEMAKER_IN_USE_ERROR = "SageMaker.ResourceInUseException"
SAGEMAKER_NOT_FOUND_ERROR = "SageMaker.ResourceNotFoundException"
STEP_FUNCTIONS_ERROR = "Sfn.SfnException"
EXECUTION_GONE_ERROR = "Sfn.ExecutionDoesNotExistException"
# botocore's batch model declares ClientException and ServerException; everything else, throttling
# included, is Batch.BatchException.
BATCH_CLIENT_ERROR = "Batch.ClientException"
BATCH_TRANSIENT_ERRORS = ("Batch.ServerException", "Batch.BatchException")
# Execution statuses after which a job of that execution must not keep running.
ENDED_UNSUCCESSFULLY = ("FAILED", "TIMED_OUT", "ABORTED")
EXECUTION_STATUS_CHANGE = "Step Functions Execution Status Change"
# Sweepers run this often and end before the next one starts.
SWEEP_EVERY = Duration.minutes(15)
SWEEP_TIMEOUT = Duration.minutes(14)
# JSONata regexes over an error's Cause.
THROTTLE_CAUSE = "/rate exceeded|throttl/i"
NOT_FOUND_CAUSE = "/not found/i"


def retry_poll_call(task: sfn.TaskStateBase, errors: Sequence[str]) -> None:
    """A status call inside a polling loop: 5 attempts; when they run out, the next poll asks again, so
    the loop never ends on throttling."""
    _retry_with_backoff(task, errors, max_attempts=5)


def retry_must_succeed_call(task: sfn.TaskStateBase, errors: Sequence[str]) -> None:
    """A call nothing asks again after (a submit, a cleanup's call): 8 attempts, about 4 minutes of
    throttling survived."""
    _retry_with_backoff(task, errors, max_attempts=8)


def _retry_with_backoff(task: sfn.TaskStateBase, errors: Sequence[str], *, max_attempts: int) -> None:
    """2 s doubling to 60 s, full jitter."""
    task.add_retry(
        errors=list(errors),
        interval=Duration.seconds(2),
        backoff_rate=2,
        max_attempts=max_attempts,
        max_delay=Duration.seconds(60),
        jitter_strategy=sfn.JitterType.FULL,
    )


def describe_service_job(
    scope: Construct, construct_id: str, job_id: str, assign: dict[str, str]
) -> tasks.CallAwsService:
    """batch:DescribeServiceJob of `job_id` (a JSONata expression), its result only in `assign`."""
    return tasks.CallAwsService.jsonata(
        scope,
        construct_id,
        service="batch",
        action="describeServiceJob",
        parameters={"JobId": expression(job_id)},
        # DescribeServiceJob supports no resource types (Service Authorization Reference, AWS Batch).
        iam_resources=["*"],
        assign=assign,
        outputs={},
    )


def literal_partition(scope: Construct) -> str:
    """The partition as text: Task Resource ARNs are validated as literals (cfn-lint E3601), and the
    stacks always have a region (config), from which CDK knows the partition."""
    partition = cdk.Stack.of(scope).partition
    if cdk.Token.is_unresolved(partition):
        raise ValueError("the pipeline stack needs a concrete region (config: region) to name its partition")
    return partition


def training_job_arn(scope: Construct, job_name_pattern: str) -> str:
    return cdk.Stack.of(scope).format_arn(
        service="sagemaker", resource="training-job", resource_name=job_name_pattern
    )


def execution_status_pattern(
    state_machine: sfn.IStateMachine, statuses: Iterable[str]
) -> events.EventPattern:
    """EventBridge pattern for the given execution statuses of one state machine."""
    return events.EventPattern(
        source=["aws.states"],
        detail_type=[EXECUTION_STATUS_CHANGE],
        detail={"stateMachineArn": [state_machine.state_machine_arn], "status": list(statuses)},
    )


def execution_prefix(scope: Construct, pipeline: sfn.StateMachine) -> str:
    """`arn:...:execution:<pipeline name>:`, the start of every ARN of the pipeline's executions (a literal
    name keeps the definitions free of references)."""
    return cdk.Stack.of(scope).format_arn(
        service="states",
        resource="execution",
        resource_name=f"{pipeline.node.default_child.state_machine_name or pipeline.state_machine_name}:",
        arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
    )


def start_when_execution_ended(
    scope: Construct, machine: sfn.StateMachine, pipeline: sfn.StateMachine, description: str
) -> events.Rule:
    """Rule `OnExecutionEnded`: `machine` runs, with the event as input, for every pipeline execution that
    failed, timed out or was aborted."""
    rule = events.Rule(
        scope,
        "OnExecutionEnded",
        description=description,
        event_pattern=execution_status_pattern(pipeline, ENDED_UNSUCCESSFULLY),
    )
    rule.add_target(targets.SfnStateMachine(machine))
    return rule


def start_every_sweep(scope: Construct, sweeper: sfn.StateMachine, description: str) -> events.Rule:
    """Rule `Sweep`: `sweeper` runs every SWEEP_EVERY (each sweep ends within SWEEP_TIMEOUT)."""
    rule = events.Rule(scope, "Sweep", description=description, schedule=events.Schedule.rate(SWEEP_EVERY))
    rule.add_target(targets.SfnStateMachine(sweeper))
    return rule
