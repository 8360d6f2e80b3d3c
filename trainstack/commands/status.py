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

from trainstack import faults, quota, runs
from trainstack.commands.common import Pipeline, add_pipeline_command, one_line_failures
from trainstack.commands.report import collect_run
from trainstack.faults import INFRASTRUCTURE
from trainstack.report.collect import slow_host_lines
from trainstack.report.expected import forecast_line, interval_lines
from trainstack.report.goodput import ledger_of
from trainstack.runs import ENDED_BADLY, Job, elapsed, status_line, tensorboard_hint


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    add_pipeline_command(
        subparsers,
        "status",
        run_status,
        description="Print a run's status, its current job, its output or error, and its goodput: the "
        "share of the billed instance time that training kept, and what failures cost (`trainstack report` "
        "draws it per attempt).",
        takes_run=True,
    )
    add_pipeline_command(
        subparsers,
        "watch",
        run_watch,
        description="Follow a run until it ends: one line per change with the time "
        "and the elapsed time; exit 0 if it succeeds, 1 if not.",
        takes_run=True,
        polls=True,
    )


@one_line_failures
def run_status(args: argparse.Namespace) -> int:
    pipeline = Pipeline.from_args(args)
    execution = pipeline.execution_of(args.run)
    lines = [describe(execution, pipeline.job_of(pipeline.run_name_of(execution)))]
    lines += fault_lines(pipeline, execution)
    report = collect_run(pipeline, execution)
    lines += slow_host_lines(report)
    lines += quota_lines(pipeline, execution)
    ledger = ledger_of(report, runs.clock())
    lines += [ledger.summary(), forecast_line(report, ledger, pipeline.settings), *interval_lines(report)]
    print("\n".join(lines))
    return 1 if execution["status"] in ENDED_BADLY else 0


@one_line_failures
def run_watch(args: argparse.Namespace) -> int:
    pipeline = Pipeline.from_args(args)
    execution = pipeline.execution_of(args.run)
    return follow(pipeline, execution["executionArn"], poll_seconds=args.poll_seconds)


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


def fault_lines(pipeline: Pipeline, execution: dict[str, Any]) -> list[str]:
    """The run's fault retries so far, each with its classification and reason, and the budget left."""
    retried = runs.retried_faults(pipeline.client("stepfunctions"), execution)
    name = runs.run_input(execution).get("profile")
    profile = next((p for p in pipeline.runs.profiles if p.name == name), pipeline.runs.profiles[0])
    budget = profile.fault_retries
    used = sum(1 for retry in retried if retry["class"] == INFRASTRUCTURE)
    lines = [
        f"fault retries: {used} of {budget.max_retries} infrastructure retries used (profile {profile.name}; "
        f"none after {budget.max_deadline_share:.0%} of the run's time limit; an unknown failure is retried "
        "once)"
    ]
    lines += [
        f"  attempt {retry['attempt']} ({retry['job']}): {faults.describe(retry)}, retried from the "
        f"checkpoint: {retry['reason']}"
        for retry in retried
    ]
    return lines


def quota_lines(pipeline: Pipeline, execution: dict[str, Any]) -> list[str]:
    """The run's quota waits so far: attempts SageMaker refused because other jobs held the quota."""
    waits = runs.quota_waits(pipeline.client("stepfunctions"), execution)
    if not waits:
        return []
    lines = [f"quota waits: {len(waits)} (other jobs held the quota; waited like for capacity)"]
    lines += [
        f"  attempt {wait['attempt']}: {quota.describe({**wait, 'name': wait['quota'], 'busy': True})}"
        for wait in waits
    ]
    return lines


def follow(pipeline: Pipeline, execution_arn: str, poll_seconds: float) -> int:
    """Print a line per change (`<UTC time>  <elapsed>  <status>`) until the execution ends; a terminal
    gets one line rewritten in place. 0 on success (output printed), else 1 with its error and cause."""
    out = sys.stdout
    stepfunctions = pipeline.client("stepfunctions")
    live = out.isatty()
    shown = ""
    while True:
        execution = stepfunctions.describe_execution(executionArn=execution_arn)
        line = status_line(execution, pipeline.job_of(pipeline.run_name_of(execution)))
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
