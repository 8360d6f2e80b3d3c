"""Starting one attempt execution (a training attempt of the pipeline, or an evaluation job of the
registration machine) in the attempt machine, and waiting for it (states:startExecution.sync:2): each job's
polls stay in the child's history, so the parent's grows by a few events per job."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.pipeline.jsonata_text import expression
from stacks.pipeline.pinned_start import PinnedStartExecution

# A StartExecution of the attempt child that AWS refuses because too many executions are open (the
# account's open-execution quota, or StartExecution's API quota). The name is the one AWS's developer
# guide gives for a Task state calling the optimized states:startExecution integration ("Start workflow
# executions from a task state": "Use the Retry on StepFunctions.ExecutionLimitExceeded to ensure your
# execution is started"); botocore's stepfunctions model lists ExecutionLimitExceeded among
# StartExecution's errors. No name for a throttled StartExecution (ThrottlingException, which the model
# does not declare) is documented for this integration, so none is retried here.
# LocalStack's snapshots, recorded against AWS, name the same refusal
# StepFunctions.ExecutionLimitExceededException: both names are retried.
START_REFUSED_ERRORS = (
    "StepFunctions.ExecutionLimitExceeded",
    "StepFunctions.ExecutionLimitExceededException",
)


def start_attempt(
    scope: Construct,
    construct_id: str,
    *,
    attempt_machine: sfn.StateMachine,
    name: str,
    attempt_input: dict[str, str],
    assign: dict[str, str],
    comment: str,
    outputs: dict | str | None = None,
) -> PinnedStartExecution:
    """A task that runs `attempt_machine` (the version its release published: pinned_start.py) with
    `attempt_input` (JSONata fields) under the execution name `name` (a JSONata expression), its output read
    by `assign` from `$states.result.Output`; the state's own output is `outputs` (nothing by default)."""
    start = PinnedStartExecution(
        scope,
        construct_id,
        comment=comment,
        state_machine=attempt_machine,
        integration_pattern=sfn.IntegrationPattern.RUN_JOB,
        associate_with_parent=True,
        name=expression(name),
        input=sfn.TaskInput.from_object(attempt_input),
        assign=assign,
        outputs={} if outputs is None else outputs,
    )
    # The refused child never started, so trying again is safe; each try evaluates the Arguments
    # again, so it starts under a new name ($uuid()). 5 s doubling to 120 s, full jitter, 6 retries:
    # at most 275 s for open executions to end.
    start.add_retry(
        errors=list(START_REFUSED_ERRORS),
        interval=cdk.Duration.seconds(5),
        backoff_rate=2,
        max_attempts=6,
        max_delay=cdk.Duration.seconds(120),
        jitter_strategy=sfn.JitterType.FULL,
    )
    return start
