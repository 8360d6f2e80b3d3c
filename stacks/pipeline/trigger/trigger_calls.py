"""The trigger machine's DynamoDB calls on its profile's item (key `profile`)."""

from __future__ import annotations

from typing import Any

from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.pipeline.jsonata_text import expression
from stacks.pipeline.machine_kit import retry_must_succeed_call

# Error names of aws-sdk:dynamodb:* tasks: Step Functions names the service `DynamoDb` (moto's copy of
# LocalStack's table, recorded against AWS); codes DynamoDB's model declares are `DynamoDb.<Code>Exception`.
CONDITION_FAILED = "DynamoDb.ConditionalCheckFailedException"
DYNAMODB_TRANSIENT_ERRORS = (
    "DynamoDb.DynamoDbException",
    "DynamoDb.ProvisionedThroughputExceededException",
    "DynamoDb.RequestLimitExceededException",
    "DynamoDb.InternalServerErrorException",
)


def dynamodb_call(
    scope: Construct,
    state_id: str,
    action: str,
    *,
    table_name: str,
    table_arn: str,
    parameters: dict[str, Any],
    **kwargs: Any,
) -> tasks.CallAwsService:
    """A DynamoDB call (`action` as the SDK integration names it: getItem, putItem, updateItem, ...) on one
    table, granted on that table only, retried while DynamoDB reports a transient error."""
    task = tasks.CallAwsService.jsonata(
        scope,
        state_id,
        service="dynamodb",
        action=action,
        iam_action=f"dynamodb:{action[0].upper()}{action[1:]}",
        parameters={"TableName": table_name, **parameters},
        iam_resources=[table_arn],
        **kwargs,
    )
    retry_must_succeed_call(task, DYNAMODB_TRANSIENT_ERRORS)
    return task


def number(value: str) -> dict[str, str]:
    """A DynamoDB number attribute from a JSONata number expression."""
    return {"N": expression(f"$string({value})")}


def text(value: str) -> dict[str, str]:
    """A DynamoDB string attribute from a JSONata string expression."""
    return {"S": expression(value)}


def lease(lease_seconds: int) -> dict[str, Any]:
    """ExpressionAttributeValues :me (this execution) and :until (its lease's end, `lease_seconds` on)."""
    return {
        ":me": text("$states.context.Execution.Name"),
        ":until": number(f"$millis() + {lease_seconds * 1000}"),
    }


class TriggerTable:
    """Calls on the trigger table for one profile's item."""

    def __init__(self, scope: Construct, *, table_name: str, table_arn: str, profile: str) -> None:
        self.scope, self.table_name, self.table_arn = scope, table_name, table_arn
        self.key = {"profile": {"S": profile}}

    def update(
        self,
        state_id: str,
        update: str,
        values: dict[str, Any] | None = None,
        *,
        condition: str | None = None,
        assign: dict[str, Any] | None = None,
    ) -> tasks.CallAwsService:
        """UpdateItem of the profile's item (`values`: its ExpressionAttributeValues)."""
        parameters: dict[str, Any] = {"UpdateExpression": update}
        if values is not None:
            parameters["ExpressionAttributeValues"] = values
        if condition is not None:
            parameters["ConditionExpression"] = condition
        return self._call(state_id, "updateItem", parameters, assign or {})

    def read(self, state_id: str, assign_to: str) -> tasks.CallAwsService:
        """GetItem (strongly consistent) of the profile's item into `$<assign_to>` ({} when there is none)."""
        return self._call(
            state_id,
            "getItem",
            {"ConsistentRead": True},
            {assign_to: expression("$exists($states.result.Item) ? $states.result.Item : {}")},
        )

    def _call(self, state_id: str, action: str, parameters: dict[str, Any], assign: dict[str, Any]):
        return dynamodb_call(
            self.scope,
            state_id,
            action,
            table_name=self.table_name,
            table_arn=self.table_arn,
            parameters={"Key": self.key, **parameters},
            assign=assign,
            outputs={},
        )
