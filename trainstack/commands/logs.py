"""`trainstack logs RUN [--follow]`: the CloudWatch logs of a run's current training job."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime

from trainstack.commands.common import Pipeline, add_pipeline_command, one_line_failures
from trainstack.runs import JOB_ENDED, TRAINING_LOG_GROUP, RunError, log_events


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    add_pipeline_command(
        subparsers,
        "logs",
        run,
        description=f"Print the log streams of a run's current training job ({TRAINING_LOG_GROUP}, "
        "one stream per host), oldest first; --follow keeps printing until the run ends.",
        takes_run=True,
        polls=True,
        arguments=lambda parser: parser.add_argument(
            "--follow", "-f", action="store_true", help="keep printing new lines until the run ends"
        ),
    )


@one_line_failures
def run(args: argparse.Namespace) -> int:
    pipeline = Pipeline.from_args(args)
    return _print_logs(pipeline, pipeline.execution_of(args.run), args)


def _print_logs(pipeline: Pipeline, execution: dict, args: argparse.Namespace) -> int:
    stepfunctions, logs = pipeline.client("stepfunctions"), pipeline.run_reader("logs")
    run_name = pipeline.run_name_of(execution)
    printed: dict[str, set[str]] = {}  # job -> event ids already printed
    while True:
        job = pipeline.training_job_of(run_name)
        if job is None and not args.follow:
            raise RunError(f"run {args.run} has no training job yet")
        if job is not None:
            seen = printed.setdefault(job.name, set())
            if len(printed) > 1 and not seen:
                print(f"--- attempt {job.attempt}: {job.name}", flush=True)
            for event in log_events(logs, job.name):
                if event["eventId"] not in seen:
                    seen.add(event["eventId"])
                    stamp = datetime.fromtimestamp(event["timestamp"] / 1000, UTC)
                    print(
                        f"{stamp:%H:%M:%S} {event['logStreamName'].split('/', 1)[-1]}  "
                        f"{event['message'].rstrip()}",
                        flush=True,
                    )
        if not args.follow:
            return 0
        status = stepfunctions.describe_execution(executionArn=execution["executionArn"])["status"]
        if status != "RUNNING" and (job is None or job.status in JOB_ENDED):
            print(f"run {run_name}: execution {status}", file=sys.stderr)
            return 0
        time.sleep(args.poll_seconds)
