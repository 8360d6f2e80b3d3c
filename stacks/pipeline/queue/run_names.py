"""Queue mode's run names are unique, as without the queue (docs/queue.md, "Run names").

Without the queue, CreateTrainingJob of `<runName>-1` fails ResourceInUse when a run name was used
before (attempt/training_attempt.py). In queue mode Batch names the training jobs itself and accepts any
number of service jobs of one name, so nothing would stop two executions from sharing a run, its
checkpoint prefix and its artifacts. So before it submits, the queued attempt claims the run name in a
DynamoDB table with a conditional PutItem: the write succeeds only when no item holds the name, or when
the item's owner is this very pipeline execution (the ARN in the request's `trainstack:execution` tag),
so a later attempt of the same run, or the same execution redriven, claims it again. The condition is
part of the write request (DynamoDB API reference, PutItem: "To prevent a new item from replacing an
existing item, use a conditional expression that contains the attribute_not_exists function with the
name of the attribute being used as the partition key"), so of two executions claiming one name at once
one wins and the other gets ConditionalCheckFailedException. A claim is kept, like a training job's name: no
time to live.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.pipeline.claim_tables import claim_table
from stacks.pipeline.jsonata_text import expression, literal
from stacks.pipeline.trigger.trigger_calls import CONDITION_FAILED, dynamodb_call
from trainstack.queue_settings import run_names_table_name

RUN_NAME_KEY = "runName"
OWNER_ATTRIBUTE = "execution"


@dataclass(frozen=True)
class RunNameTable:
    """The table the queued attempt claims run names in: its name and ARN."""

    name: str
    arn: str


def run_names_table(scope: Construct, project: str, existing: str | None = None) -> RunNameTable:
    """The table `<project>-run-names`; `existing`: the name of one another stack made (and retains), used
    as it is (with teams, the pre-teams pipeline's: docs/teams.md, "Migrations")."""
    if existing is not None:
        return RunNameTable(
            existing,
            cdk.Stack.of(scope).format_arn(service="dynamodb", resource="table", resource_name=existing),
        )
    table = claim_table(
        scope,
        "RunNames",
        name=run_names_table_name(project),
        key=RUN_NAME_KEY,
        removal=cdk.RemovalPolicy.RETAIN,  # the names stay used after a redeploy, as job names do
        holds="Run names and execution ARNs",
    )
    # The literal name in the definitions (no reference for the emulator and the IAM tests to resolve).
    return RunNameTable(run_names_table_name(project), table.table_arn)


def claim_run_name(
    scope: Construct, table: RunNameTable, *, run_name: str, owner: str, in_use: sfn.IChainable
) -> sfn.TaskStateBase:
    """The claim of `run_name` for `owner` (JSONata expressions: the run name and the pipeline execution's
    ARN). Claimed: the next state (`.next`), given this state's input; held by another execution: `in_use`,
    with `$nameOwner` the ARN of the execution that holds it."""
    claim = _call(
        scope,
        "ClaimRunName",
        "putItem",
        table,
        {
            "Item": {
                RUN_NAME_KEY: {"S": expression(run_name)},
                OWNER_ATTRIBUTE: {"S": expression(owner)},
                "claimedAt": {"S": expression("$now()")},
            },
            "ConditionExpression": "attribute_not_exists(#run) OR #owner = :owner",
            # Names, not words: DynamoDB reserves many words as attribute names in expressions.
            "ExpressionAttributeNames": {"#run": RUN_NAME_KEY, "#owner": OWNER_ATTRIBUTE},
            "ExpressionAttributeValues": {":owner": {"S": expression(owner)}},
        },
        # The next state reads the attempt's input as its own.
        outputs=expression("$states.input"),
    )
    read_owner = _call(
        scope,
        "ReadRunNameOwner",
        "getItem",
        table,
        {"Key": {RUN_NAME_KEY: {"S": expression(run_name)}}, "ConsistentRead": True},
        assign={"nameOwner": expression(f"$states.result.Item.{OWNER_ATTRIBUTE}.S")},
    )
    claim.add_catch(read_owner, errors=[CONDITION_FAILED], outputs={})
    read_owner.next(in_use)
    return claim


def name_in_use_cause(run_name: str) -> str:
    """JSONata: the cause of a refused claim, worded as the direct attempt's (attempt/training_attempt.py)."""
    return (
        f'"runName " & {run_name} & " is already used by pipeline execution " & $nameOwner & '
        f"{literal('; choose another runName.')}"
    )


def _call(
    scope: Construct,
    state_id: str,
    action: str,
    table: RunNameTable,
    parameters: dict,
    assign: dict | None = None,
    outputs: Any = None,
) -> tasks.CallAwsService:
    return dynamodb_call(
        scope,
        state_id,
        action,
        table_name=table.name,
        table_arn=table.arn,
        parameters=parameters,
        assign=assign or {},
        outputs={} if outputs is None else outputs,
    )
