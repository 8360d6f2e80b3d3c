"""Registrations in one model package group are serialized: a lease per group in a DynamoDB table.

From the baseline lookup to the decision on the new version, a registration holds its group's lease, so a
second run registering at the same time decides against the first one's outcome (docs/registry.md,
step 4). The lease is a conditional PutItem: it succeeds when no item holds
the group, when this very execution holds it (a retried call, a redriven execution), or when the holder's
lease has ended (an execution aborted inside the lease: it can run no Catch). The condition is part of the
write (DynamoDB API reference, PutItem, ConditionExpression), so of two registrations one wins and the other
gets ConditionalCheckFailedException and waits. The lease is released (a DeleteItem conditional on the
owner) on every path out of the section: its states catch States.ALL (registration_states.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.pipeline.claim_tables import claim_table
from stacks.pipeline.trigger.trigger_calls import CONDITION_FAILED, dynamodb_call, number, text
from trainstack.registry import LEASE_KEY, LEASE_SECONDS, LEASE_WAIT_SECONDS, lease_table_name

OWNER = "$states.context.Execution.Id"


@dataclass(frozen=True)
class LeaseTable:
    name: str
    arn: str


def lease_table(scope: Construct, project: str) -> LeaseTable:
    table = claim_table(
        scope,
        "GroupLeases",
        name=lease_table_name(project),
        key=LEASE_KEY,
        removal=cdk.RemovalPolicy.DESTROY,  # leases last minutes: nothing to keep
        holds="Group names and execution ARNs",
    )
    return LeaseTable(lease_table_name(project), table.table_arn)


def acquire_lease(scope: Construct, table: LeaseTable, group: str) -> tasks.CallAwsService:
    """The lease of `group` (a JSONata expression) for this execution, for LEASE_SECONDS; while another
    execution holds it, wait LEASE_WAIT_SECONDS and ask again. Its failures: the caller's catch."""
    acquire = _call(
        scope,
        "AcquireGroupLease",
        "putItem",
        table,
        {
            "Item": {
                LEASE_KEY: text(group),
                "owner": text(OWNER),
                "untilMillis": number(f"$millis() + {LEASE_SECONDS * 1000}"),
            },
            "ConditionExpression": "attribute_not_exists(#group) OR #owner = :owner OR #until < :now",
            "ExpressionAttributeNames": {"#group": LEASE_KEY, "#owner": "owner", "#until": "untilMillis"},
            "ExpressionAttributeValues": {":owner": text(OWNER), ":now": number("$millis()")},
        },
    )
    wait = sfn.Wait.jsonata(
        scope,
        "WaitForGroupLease",
        comment="Another registration of the group decides now: decide after it, against its outcome.",
        time=sfn.WaitTime.duration(cdk.Duration.seconds(LEASE_WAIT_SECONDS)),
    )
    acquire.add_catch(wait, errors=[CONDITION_FAILED], outputs={})
    wait.next(acquire)
    return acquire


def release_lease(scope: Construct, table: LeaseTable, group: str, then: sfn.IChainable) -> sfn.IChainable:
    """Give the lease back when this execution still holds it, then `then`; a lease lost (ended, taken) or
    a failed call goes on to `then` too (the lease ends by itself)."""
    release = _call(
        scope,
        "ReleaseGroupLease",
        "deleteItem",
        table,
        {
            "Key": {LEASE_KEY: text(group)},
            "ConditionExpression": "#owner = :owner",
            "ExpressionAttributeNames": {"#owner": "owner"},
            "ExpressionAttributeValues": {":owner": text(OWNER)},
        },
    )
    release.add_catch(then, errors=["States.ALL"], outputs={})
    return release.next(then)


def _call(
    scope: Construct, state_id: str, action: str, table: LeaseTable, parameters: dict
) -> tasks.CallAwsService:
    return dynamodb_call(
        scope,
        state_id,
        action,
        table_name=table.name,
        table_arn=table.arn,
        parameters=parameters,
        outputs={},
    )
