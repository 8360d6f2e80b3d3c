"""`trainstack stop RUN`: stop a run's pipeline execution; the pipeline's cleanup stops its job."""

from __future__ import annotations

import argparse
import getpass

from trainstack.commands.common import Pipeline, add_pipeline_command, one_line_failures
from trainstack.runs import JOB_ENDED, RunError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    add_pipeline_command(
        subparsers,
        "stop",
        run,
        description="Stop a run's pipeline execution. The pipeline's cleanup machine then stops its "
        "training job (it saves a checkpoint on SIGTERM); starting the run again resumes from it.",
        takes_run=True,
    )


@one_line_failures
def run(args: argparse.Namespace) -> int:
    pipeline = Pipeline.from_args(args)
    execution = pipeline.execution_of(args.run)
    if execution["status"] != "RUNNING":
        raise RunError(
            f"run {args.run} is not running: its execution {execution['name']} ended {execution['status']}"
        )
    pipeline.client("stepfunctions").stop_execution(
        executionArn=execution["executionArn"],
        error="TrainingStopped",
        cause=f"stopped by {getpass.getuser()} with trainstack stop",
    )
    job = pipeline.training_job_of(pipeline.run_name_of(execution))
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
