"""`trainstack status RUN` prints a run; `trainstack watch RUN` follows it to its end.

RUN is a run name (`trainstack runs` lists them) or an execution ARN printed by `trainstack start`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from typing import Any

from trainstack import runs
from trainstack.commands.common import (
    Pipeline,
    UsageError,
    add_pipeline_arguments,
    add_poll_argument,
    one_line_failures,
    subcommand_errors,
)
from trainstack.runs import (
    ENDED_BADLY,
    Job,
    elapsed,
    is_execution_arn,
    latest_execution,
    run_name_of,
    status_line,
    tensorboard_hint,
)

RUN_HELP = "run name (see `trainstack runs`) or execution ARN (printed by `trainstack start`)"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    status = subparsers.add_parser(
        "status",
        help="print a run's status and output",
        description="Print a run's status, its current job and its output or error.",
    )
    status.add_argument("run", metavar="RUN", help=RUN_HELP)
    add_pipeline_arguments(status)
    status.set_defaults(handler=run_status)
    subcommand_errors(status)

    watch = subparsers.add_parser(
        "watch",
        help="follow a run until it ends",
        description="Follow a run until it ends: one line per change with the time "
        "and the elapsed time; exit 0 if it succeeds, 1 if not.",
    )
    watch.add_argument("run", metavar="RUN", help=RUN_HELP)
    add_pipeline_arguments(watch)
    add_poll_argument(watch)
    watch.set_defaults(handler=run_watch)
    subcommand_errors(watch)


@one_line_failures
def run_status(args: argparse.Namespace) -> int:
    pipeline = Pipeline.from_args(args)
    state_machine_arn = _state_machine(pipeline, args.run)
    execution = latest_execution(pipeline.client("stepfunctions"), state_machine_arn, args.run)
    job = pipeline.job_of(run_name_of(execution, pipeline.settings.project))
    print(describe(execution, job))
    return 1 if execution["status"] in ENDED_BADLY else 0


@one_line_failures
def run_watch(args: argparse.Namespace) -> int:
    pipeline = Pipeline.from_args(args)
    state_machine_arn = _state_machine(pipeline, args.run)
    execution = latest_execution(pipeline.client("stepfunctions"), state_machine_arn, args.run)
    return follow(pipeline, execution["executionArn"], poll_seconds=args.poll_seconds)


def _state_machine(pipeline: Pipeline, run: str) -> str:
    """The state machine to look RUN up in; an execution ARN needs none and names its own region."""
    if is_execution_arn(run):
        pipeline.region = run.split(":")[3]
        return run.rsplit(":", 2)[0].replace(":execution", ":stateMachine")
    if run.startswith("arn:"):
        raise UsageError(
            f"RUN: '{run}' is not a Step Functions execution ARN "
            "(arn:aws:states:<region>:<account>:execution:<state machine>:<name>) nor a run name"
        )
    return pipeline.state_machine_arn


def describe(execution: dict[str, Any], job: Any) -> str:
    lines = [f"{execution['executionArn']}: {execution['status']}", f"started: {execution['startDate']}"]
    if execution.get("stopDate"):
        lines.append(f"stopped: {execution['stopDate']}")
    lines.append(f"job: {status_line(execution, job).split(' | ', 1)[1]}")
    hint = tensorboard_hint(job) if isinstance(job, Job) else None
    if hint:
        lines.append(f"tensorboard: {hint}")
    if execution.get("output"):
        lines.append("output: " + json.dumps(json.loads(execution["output"]), indent=2))
    if execution.get("error") or execution.get("cause"):
        lines.append(f"error: {execution.get('error', '')}: {execution.get('cause', '')}")
    return "\n".join(lines)


def follow(pipeline: Pipeline, execution_arn: str, poll_seconds: float) -> int:
    """Print a line per change (`<UTC time>  <elapsed>  <status>`) until the execution ends; a terminal
    gets one line rewritten in place. 0 on success (output printed), else 1 with its error and cause."""
    out = sys.stdout
    stepfunctions = pipeline.client("stepfunctions")
    live = out.isatty()
    shown = ""
    while True:
        execution = stepfunctions.describe_execution(executionArn=execution_arn)
        line = status_line(execution, pipeline.job_of(run_name_of(execution, pipeline.settings.project)))
        stamped = f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S}Z  {elapsed(execution, runs.clock()):>8}  {line}"
        if live:
            out.write(f"\r\x1b[2K{stamped}")
        elif line != shown:
            out.write(f"{stamped}\n")
        out.flush()
        shown = line
        if execution["status"] != "RUNNING":
            break
        time.sleep(poll_seconds)
    if live:
        out.write("\n")
    if execution["status"] == "SUCCEEDED":
        print(json.dumps(json.loads(execution.get("output") or "{}"), indent=2), file=out)
        return 0
    error = execution.get("error") or execution["status"]
    cause = execution.get("cause") or "no cause reported"
    print(f"trainstack: execution {execution['status']}: {error}: {cause}", file=sys.stderr)
    return 1
