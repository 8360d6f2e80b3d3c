"""`trainstack stop RUN`: stop a run's pipeline execution; the pipeline's cleanup stops its job."""

from __future__ import annotations

import argparse
import getpass

from trainstack.commands.common import (
    Pipeline,
    add_pipeline_arguments,
    one_line_failures,
    subcommand_errors,
)
from trainstack.runs import JOB_ENDED, RunError, current_job, latest_execution, run_name_of


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "stop",
        help="stop a run",
        description="Stop a run's pipeline execution. The pipeline's cleanup machine then stops its "
        "training job (it saves a checkpoint on SIGTERM); starting the run again resumes from it.",
    )
    parser.add_argument("run", metavar="RUN", help="run name (see `trainstack runs`) or execution ARN")
    add_pipeline_arguments(parser)
    parser.set_defaults(handler=run)
    subcommand_errors(parser)


@one_line_failures
def run(args: argparse.Namespace) -> int:
    pipeline = Pipeline.from_args(args)
    stepfunctions = pipeline.client("stepfunctions")
    state_machine_arn = "" if args.run.startswith("arn:") else pipeline.state_machine_arn
    execution = latest_execution(stepfunctions, state_machine_arn, args.run)
    if execution["status"] != "RUNNING":
        raise RunError(
            f"run {args.run} is not running: its execution {execution['name']} "
            f"ended {execution['status']}"
        )
    stepfunctions.stop_execution(
        executionArn=execution["executionArn"],
        error="TrainingStopped",
        cause=f"stopped by {getpass.getuser()} with trainstack stop",
    )
    job = current_job(pipeline.client("sagemaker"), run_name_of(execution, pipeline.settings.project))
    print(f"stopped execution {execution['executionArn']}")
    if job is None:
        print("no training job had started")
    elif job.status in JOB_ENDED:
        print(f"its last training job {job.name} had already ended ({job.status})")
    else:
        print(
            f"the pipeline's cleanup stops training job {job.name} (attempt {job.attempt}) within a minute "
            f"or two; `trainstack status {args.run}` shows it"
        )
    return 0
