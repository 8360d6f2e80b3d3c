"""`trainstack status ARN` prints a pipeline execution; `trainstack watch ARN` follows it to its end.

Exit codes: 0 running or succeeded, 1 failed/timed out/aborted (or AWS error), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from trainstack.config import ConfigError, load_settings

EXECUTION_ARN_PATTERN = r"^arn:aws[a-z-]*:states:[a-z0-9-]+:\d{12}:execution:[^:]+:[^:]+$"
ENDED_BADLY = ("FAILED", "TIMED_OUT", "ABORTED")
DEFAULT_POLL_SECONDS = 15.0


class UsageError(Exception):
    """Bad command-line input: one sentence naming the flag; exit code 2."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    status = subparsers.add_parser("status", help="print a pipeline execution's status and output")
    status.add_argument("execution_arn", metavar="ARN", help="execution ARN printed by `trainstack start`")
    status.add_argument("--region", help="AWS region (default: the execution ARN's)")
    status.set_defaults(handler=run_status)
    one_sentence_errors(status)

    watch = subparsers.add_parser("watch", help="follow a pipeline execution with a live status line")
    watch.add_argument("execution_arn", metavar="ARN", help="execution ARN printed by `trainstack start`")
    watch.add_argument("--config", help="config file, for the project name (default: config/default.yaml)")
    watch.add_argument("--region", help="AWS region (default: the execution ARN's)")
    add_poll_argument(watch)
    watch.set_defaults(handler=run_watch)
    one_sentence_errors(watch)


def add_poll_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--poll-seconds", type=float, default=DEFAULT_POLL_SECONDS, help=argparse.SUPPRESS)


def one_sentence_errors(parser: argparse.ArgumentParser) -> None:
    """argparse's usage block + message becomes one line naming the flag, exit code 2."""

    def error(message: str):
        print(f"{parser.prog}: {message.rstrip('.')}.", file=sys.stderr)
        raise SystemExit(2)

    parser.error = error  # type: ignore[method-assign]


def run_status(args: argparse.Namespace) -> int:
    try:
        region = region_of(args.execution_arn, args.region)
        execution = boto3.client("stepfunctions", region_name=region).describe_execution(
            executionArn=args.execution_arn
        )
    except UsageError as error:
        return usage_failure(args, error)
    except (BotoCoreError, ClientError) as error:
        return aws_failure(error)
    print(describe(execution))
    return 1 if execution["status"] in ENDED_BADLY else 0


def run_watch(args: argparse.Namespace) -> int:
    try:
        region = region_of(args.execution_arn, args.region)
        project = load_settings(args.config).project
    except UsageError as error:
        return usage_failure(args, error)
    except ConfigError as error:
        print(f"trainstack: {error}", file=sys.stderr)
        return 2
    try:
        return follow(args.execution_arn, region, project, poll_seconds=args.poll_seconds)
    except (BotoCoreError, ClientError) as error:
        return aws_failure(error)


def region_of(execution_arn: str, region: str | None) -> str:
    if not re.match(EXECUTION_ARN_PATTERN, execution_arn):
        raise UsageError(
            f"ARN: '{execution_arn}' is not a Step Functions execution ARN "
            "(arn:aws:states:<region>:<account>:execution:<state machine>:<name>)"
        )
    return region or execution_arn.split(":")[3]


def usage_failure(args: argparse.Namespace, error: UsageError) -> int:
    print(f"trainstack {args.command}: {error}.", file=sys.stderr)
    return 2


def aws_failure(error: Exception) -> int:
    print(f"trainstack: AWS call failed: {error}", file=sys.stderr)
    return 1


def describe(execution: dict[str, Any]) -> str:
    lines = [f"{execution['executionArn']}: {execution['status']}", f"started: {execution['startDate']}"]
    if execution.get("stopDate"):
        lines.append(f"stopped: {execution['stopDate']}")
    if execution.get("output"):
        lines.append("output: " + json.dumps(json.loads(execution["output"]), indent=2))
    if execution.get("error") or execution.get("cause"):
        lines.append(f"error: {execution.get('error', '')}: {execution.get('cause', '')}")
    return "\n".join(lines)


def run_name_of(execution: dict[str, Any], project: str) -> str:
    """The input's runName, or the state machine's default `<project>-<execution name>`."""
    try:
        given = json.loads(execution.get("input") or "{}").get("runName")
    except (ValueError, AttributeError):
        given = None
    return given if isinstance(given, str) else f"{project}-{execution['name']}"


def current_job(sagemaker: Any, run_name: str) -> tuple[int, dict[str, Any]] | None:
    """(attempt, DescribeTrainingJob) of the newest job `<runName>-<attempt>`; None before the first."""
    pattern = re.compile(rf"^{re.escape(run_name)}-(\d+)$")
    summaries = sagemaker.list_training_jobs(
        NameContains=run_name, SortBy="CreationTime", SortOrder="Descending", MaxResults=100
    )["TrainingJobSummaries"]
    attempts = [
        (int(match.group(1)), summary["TrainingJobName"])
        for summary in summaries
        if (match := pattern.match(summary["TrainingJobName"]))
    ]
    if not attempts:
        return None
    attempt, name = max(attempts)
    return attempt, sagemaker.describe_training_job(TrainingJobName=name)


def status_line(execution: dict[str, Any], job: tuple[int, dict[str, Any]] | None) -> str:
    if job is None:
        return f"{execution['status']} | no training job yet"
    attempt, description = job
    return (
        f"{execution['status']} | attempt {attempt} | {description['TrainingJobName']} | "
        f"{description['TrainingJobStatus']} / {description.get('SecondaryStatus', '-')}"
    )


def follow(execution_arn: str, region: str, project: str, poll_seconds: float = DEFAULT_POLL_SECONDS) -> int:
    """Show a live status line until the execution ends; 0 on success, else 1 with its error and cause."""
    out = sys.stdout
    stepfunctions = boto3.client("stepfunctions", region_name=region)
    sagemaker = boto3.client("sagemaker", region_name=region)
    live = out.isatty()
    shown = ""
    while True:
        execution = stepfunctions.describe_execution(executionArn=execution_arn)
        line = status_line(execution, current_job(sagemaker, run_name_of(execution, project)))
        if line != shown:
            # A terminal keeps one line rewritten in place; logs get one line per change.
            out.write(f"\r\x1b[2K{line}" if live else f"{line}\n")
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
