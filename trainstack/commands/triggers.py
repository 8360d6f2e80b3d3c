"""`trainstack triggers`: the retrain trigger of the config (retrain_on_new_data) as it stands: its profile's
pending window, the execution that controls it, the last dataset hash and run, the last decision and the
last object events (each one an execution of the trigger machine, its input the S3 event)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from trainstack.commands.common import Pipeline, UsageError, add_pipeline_command, one_line_failures
from trainstack.trigger_settings import (
    RetrainOnNewData,
    trigger_machine_name,
    trigger_of,
    trigger_table_name,
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    add_pipeline_command(
        subparsers,
        "triggers",
        run,
        description="Show the retrain trigger (retrain_on_new_data): pending window, controller, last "
        "dataset hash and run, last decision, last object events.",
        arguments=lambda parser: parser.add_argument(
            "--events", type=int, default=10, help="how many of the last events to list (default 10)"
        ),
    )


def _time(millis: Any) -> str:
    return datetime.fromtimestamp(float(millis) / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def describe_trigger(
    trigger: RetrainOnNewData, item: dict[str, Any], events: list[dict[str, Any]]
) -> list[str]:
    """The lines `trainstack triggers` prints for one profile (`item`: its DynamoDB item; `events`: the
    trigger machine's executions, newest first, described)."""
    value = {name: next(iter(attribute.values())) for name, attribute in item.items()}
    lines = [
        f"profile {trigger.profile}: new data under {trigger.prefix} (quiet {trigger.quiet_minutes} min, "
        f"at most {trigger.max_delay_hours:g} h after the first event)"
    ]
    if "firstEventMillis" in value:
        closes = min(
            float(value["lastEventMillis"]) + trigger.quiet_minutes * 60_000,
            float(value["firstEventMillis"]) + trigger.max_delay_hours * 3_600_000,
        )
        lines.append(
            f"  pending window: {value['pendingEvents']} event(s) since {_time(value['firstEventMillis'])}, "
            f"last {_time(value['lastEventMillis'])} ({value['lastEventKey']}); closes at {_time(closes)} "
            "unless more arrive"
        )
    else:
        lines.append("  pending window: none")
    if "controller" in value:
        lines.append(
            f"  controller: execution {value['controller']} (lease until {_time(value['controllerUntil'])})"
        )
    if "lastHash" in value:
        lines.append(f"  last dataset hash: {value['lastHash']} (trained by run {value['lastHashRun']})")
    else:
        lines.append("  last dataset hash: none (no triggered run has succeeded)")
    if "lastDecision" in value:
        decision = json.loads(value["lastDecision"])
        lines.append(
            f"  last decision ({_time(decision['atMillis'])}): {decision['decision']}: {decision['message']}"
        )
    lines.append(f"  last events ({len(events)}):" if events else "  last events: none")
    for execution in events:
        handed = json.loads(execution.get("input") or "{}")
        what = (
            "hand-over" if handed.get("handover") else handed.get("detail", {}).get("object", {}).get("key")
        )
        output = json.loads(execution.get("output") or "{}")
        outcome = output.get("decision") or execution.get("error") or ""
        started = execution["startDate"].astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        lines.append(f"    {started}  {execution['status']:<9} {what}  {outcome}".rstrip())
    return lines


@one_line_failures
def run(args: argparse.Namespace) -> int:
    pipeline = Pipeline.from_args(args)
    trigger = trigger_of(pipeline.settings, pipeline.runs.team)
    if trigger is None:
        whose = f"team {pipeline.runs.team}" if pipeline.runs.team else args.config or "the config"
        raise UsageError(f"--config: {whose} sets no retrain_on_new_data, so no trigger is deployed")
    if args.events < 0:
        raise UsageError(f"--events must be 0 or more, not {args.events}")
    project = pipeline.runs.project  # the namespace: with teams, the team's trigger and table
    item = (
        pipeline.client("dynamodb")
        .get_item(
            TableName=trigger_table_name(project),
            Key={"profile": {"S": trigger.profile}},
            ConsistentRead=True,
        )
        .get("Item", {})
    )
    machine = pipeline.state_machine_arn.rsplit(":", 1)[0] + ":" + trigger_machine_name(project)
    stepfunctions = pipeline.client("stepfunctions")
    listed = stepfunctions.list_executions(stateMachineArn=machine, maxResults=max(args.events, 1))[
        "executions"
    ]
    events = [stepfunctions.describe_execution(executionArn=e["executionArn"]) for e in listed[: args.events]]
    print("\n".join(describe_trigger(trigger, item, events)))
    return 0
