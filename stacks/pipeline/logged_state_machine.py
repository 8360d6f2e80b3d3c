"""One way to build trainstack's state machines: JSONata, X-Ray traced, every event logged."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct


def execution_log_group_name(state_machine_name: str) -> str:
    return f"/aws/vendedlogs/states/{state_machine_name}"


def logged_state_machine(
    scope: Construct,
    construct_id: str,
    *,
    name: str,
    chain: sfn.IChainable,
    timeout: cdk.Duration | None,
    express: bool = False,
    definition_substitutions: dict[str, str] | None = None,
) -> tuple[sfn.StateMachine, logs.LogGroup]:
    """The machine and its log group (`/aws/vendedlogs/states/<name>`, kept three months). `express`: an
    EXPRESS machine, whose events are logged without their data (its answers belong to their callers)."""
    log_group = logs.LogGroup(
        scope,
        f"{construct_id}Logs",
        log_group_name=execution_log_group_name(name),
        retention=logs.RetentionDays.THREE_MONTHS,
        removal_policy=cdk.RemovalPolicy.DESTROY,
    )
    machine = sfn.StateMachine(
        scope,
        construct_id,
        state_machine_name=name,
        state_machine_type=sfn.StateMachineType.EXPRESS if express else sfn.StateMachineType.STANDARD,
        query_language=sfn.QueryLanguage.JSONATA,
        definition_body=sfn.DefinitionBody.from_chainable(chain),
        definition_substitutions=definition_substitutions,
        timeout=timeout,
        tracing_enabled=True,
        logs=sfn.LogOptions(
            destination=log_group, level=sfn.LogLevel.ALL, include_execution_data=not express
        ),
    )
    return machine, log_group
