"""`trainstack runs`: the pipeline's recent runs, one line each."""

from __future__ import annotations

import argparse

from trainstack.commands.common import Pipeline, UsageError, add_pipeline_command, one_line_failures
from trainstack.runs import Job, clock, elapsed, run_input

COLUMNS = ("RUN", "PROFILE", "STATUS", "ATTEMPT", "JOB", "INSTANCES", "ELAPSED")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    add_pipeline_command(
        subparsers,
        "runs",
        run,
        description="List the pipeline's recent runs, newest first.",
        arguments=lambda parser: parser.add_argument(
            "--max", type=int, default=20, metavar="N", help="how many runs (default: 20)"
        ),
    )


@one_line_failures
def run(args: argparse.Namespace) -> int:
    if args.max < 1:
        raise UsageError(f"--max: {args.max} is not a number of runs; give 1 or more")
    pipeline = Pipeline.from_args(args)
    rows = list(_rows(pipeline, args.max))
    if not rows:
        print(f"no runs yet in {pipeline.state_machine_arn}")
        return 0
    widths = [max(len(row[column]) for row in [COLUMNS, *rows]) for column in range(len(COLUMNS))]
    for row in [COLUMNS, *rows]:
        print("  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)).rstrip())
    return 0


def _rows(pipeline: Pipeline, limit: int):
    stepfunctions = pipeline.client("stepfunctions")
    listed = stepfunctions.list_executions(stateMachineArn=pipeline.state_machine_arn, maxResults=limit)
    now = clock()
    for item in sorted(listed["executions"], key=lambda item: item["startDate"], reverse=True)[:limit]:
        execution = stepfunctions.describe_execution(executionArn=item["executionArn"])
        run_name = pipeline.run_name_of(execution)
        job = pipeline.job_of(run_name)
        yield (
            run_name,
            str(run_input(execution).get("profile", "-")),
            execution["status"],
            str(job.attempt) if job else "-",
            f"{job.name} ({job.status})" if job else "-",
            job.instances if isinstance(job, Job) else "-",
            elapsed(execution, now),
        )
