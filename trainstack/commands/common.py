"""What the AWS commands share: where the pipeline is, usage errors, AWS failures.

Exit codes everywhere: 0 success (or still running), 1 the run failed or AWS refused, 2 bad input.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError, NoRegionError

from trainstack.cli import COMMANDS
from trainstack.client_settings import ClientSettingsError, read_client_settings
from trainstack.config import Settings
from trainstack.config_loading import ConfigError, load_settings
from trainstack.pipeline_runs import PipelineRuns, queue_namespace, runs_for
from trainstack.queue_settings import training_queue_name
from trainstack.run_reader import ReaderBatch, ReaderLogs, ReaderSageMaker, RunReader, run_reader_arn
from trainstack.runs import (
    Job,
    QueuedJob,
    RunError,
    find_state_machine,
    is_execution_arn,
    latest_execution,
    run_job,
    run_name_of,
)

DEFAULT_POLL_SECONDS = 15.0
RUN_HELP = "run name (see `trainstack runs`) or execution ARN (printed by `trainstack start`)"


class UsageError(Exception):
    """Bad command-line input: one sentence naming the flag or argument; exit code 2."""


def subcommand_errors(parser: argparse.ArgumentParser) -> None:
    """argparse's own errors (unknown flag, bad int) show this subcommand's usage, then one sentence."""

    def error(message: str):
        print(parser.format_usage().rstrip(), file=sys.stderr)
        print(f"{parser.prog}: {message.rstrip('.')}.", file=sys.stderr)
        raise SystemExit(2)

    parser.error = error  # type: ignore[method-assign]


def add_config_argument(parser: argparse.ArgumentParser, what: str = "") -> None:
    parser.add_argument(
        "--config",
        default=os.environ.get("TRAINSTACK_CONFIG"),
        help=f"config file{what} (default: $TRAINSTACK_CONFIG, else config/default.yaml)",
    )


def add_pipeline_arguments(parser: argparse.ArgumentParser) -> None:
    """--config or --deployment, --team, --region and --state-machine-arn: where the pipeline is."""
    add_config_argument(parser)
    parser.add_argument(
        "--deployment",
        default=os.environ.get("TRAINSTACK_DEPLOYMENT"),
        help="instead of --config: the deployed project's name, whose settings the pipeline stack publishes "
        "(default: $TRAINSTACK_DEPLOYMENT)",
    )
    parser.add_argument(
        "--team",
        default=os.environ.get("TRAINSTACK_TEAM"),
        help="with teams: the team whose pipeline to use (default: $TRAINSTACK_TEAM)",
    )
    parser.add_argument("--region", help="AWS region (default: the config's)")
    parser.add_argument("--state-machine-arn", help="skip the CloudFormation lookup of the pipeline stack")


def add_poll_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--poll-seconds", type=float, default=DEFAULT_POLL_SECONDS, help=argparse.SUPPRESS)


def add_pipeline_command(
    subparsers: argparse._SubParsersAction,
    name: str,
    handler: Callable[[argparse.Namespace], int],
    *,
    description: str,
    takes_run: bool = False,
    polls: bool = False,
    arguments: Callable[[argparse.ArgumentParser], object] | None = None,
    summary: str | None = None,
) -> None:
    """Subcommand NAME of the deployed pipeline: RUN (takes_run), the command's own `arguments`, then
    --config, --region, --state-machine-arn and (polls) --poll-seconds; argparse's errors are one sentence.
    Its summary is the one `trainstack --help` lists, unless given (an action of a command)."""
    parser = subparsers.add_parser(name, help=summary or COMMANDS[name][1], description=description)
    if takes_run:
        parser.add_argument("run", metavar="RUN", help=RUN_HELP)
    if arguments:
        arguments(parser)
    add_pipeline_arguments(parser)
    if polls:
        add_poll_argument(parser)
    parser.set_defaults(handler=handler)
    subcommand_errors(parser)


@dataclass
class Pipeline:
    """The deployed pipeline a command talks to, with boto3 clients in its region."""

    settings: Settings
    region: str
    given_state_machine_arn: str | None = None
    team: str | None = None

    def __post_init__(self) -> None:
        try:
            self.runs: PipelineRuns = runs_for(self.settings, self.team)
        except ValueError as error:
            raise UsageError(str(error)) from None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Pipeline:
        team = getattr(args, "team", None)
        deployment = getattr(args, "deployment", None)
        settings = _deployed_settings(args, team) if deployment else _config_settings(args.config)
        return cls(settings, args.region or settings.region, getattr(args, "state_machine_arn", None), team)

    def client(self, service: str) -> Any:
        return boto3.client(service, region_name=self.region)

    def run_reader(self, service: str) -> Any:
        """A client that reads the runs' training jobs (`sagemaker`), their logs (`logs`) and service jobs
        (`batch`). With teams, through the team's run reader (trainstack/run_reader.py): the team's start
        policy grants nothing else on them."""
        real = self.client(service)
        if not self.settings.teams:
            return real
        reader = RunReader(
            self.client("stepfunctions"), run_reader_arn(self.state_machine_arn, self.runs.project)
        )
        if service == "logs":
            return ReaderLogs(reader)
        return (ReaderSageMaker if service == "sagemaker" else ReaderBatch)(reader, real.exceptions)

    @property
    def queue_name(self) -> str | None:
        """The AWS Batch job queue of queue mode; None in direct mode."""
        return training_queue_name(queue_namespace(self.settings)) if self.settings.queue.enabled else None

    def batch(self) -> Any | None:
        """A Batch client (reading the runs' service jobs) in queue mode; None in direct mode."""
        return self.run_reader("batch") if self.queue_name else None

    def job_of(self, run_name: str) -> Job | QueuedJob | None:
        """The run's job: waiting in the queue (queue mode), else its newest training job, else None."""
        return run_job(self.run_reader("sagemaker"), self.batch(), self.queue_name, run_name)

    def training_job_of(self, run_name: str) -> Job | None:
        """The run's newest training job (queue mode: the one Batch started), else None."""
        job = self.job_of(run_name)
        return job if isinstance(job, Job) else None

    @cached_property
    def state_machine_arn(self) -> str:
        return self.given_state_machine_arn or find_state_machine(
            self.client("cloudformation"), self.runs.project, self.region
        )

    def execution_of(self, run: str) -> dict[str, Any]:
        """DescribeExecution of RUN: an execution ARN (in the region it names, no stack lookup), or the
        newest execution of the run named so in the pipeline's state machine."""
        given_arn = is_execution_arn(run)
        if run.startswith("arn:") and not given_arn:
            raise UsageError(
                f"RUN: '{run}' is not a Step Functions execution ARN "
                "(arn:aws:states:<region>:<account>:execution:<state machine>:<name>) nor a run name"
            )
        if given_arn:
            self.region = run.split(":")[3]
        state_machine_arn = "" if given_arn else self.state_machine_arn
        return latest_execution(self.client("stepfunctions"), state_machine_arn, run)

    def run_name_of(self, execution: dict[str, Any]) -> str:
        return run_name_of(execution, self.runs.project)


def _config_settings(config: str | None) -> Settings:
    try:
        return load_settings(config)
    except ConfigError as error:
        raise UsageError(f"--config: {error}".rstrip(".")) from None


def _deployed_settings(args: argparse.Namespace, team: str | None) -> Settings:
    """The settings the deployment's pipeline stack published (trainstack/client_settings.py), read in
    --region or the AWS configuration's region."""
    if args.config:
        raise UsageError(
            "--deployment and --config (or $TRAINSTACK_DEPLOYMENT and $TRAINSTACK_CONFIG) both name the "
            "pipeline's settings; give one"
        )
    try:
        ssm = boto3.client("ssm", region_name=args.region)
        return read_client_settings(ssm, args.deployment, team)
    except NoRegionError:
        raise UsageError(
            f"--deployment {args.deployment}: no region; pass --region or set AWS_REGION"
        ) from None
    except ClientSettingsError as error:
        raise UsageError(str(error)) from None


def one_line_failures(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A command's handler whose failures end in one line: bad input exits 2, a failed run or a refused
    AWS call exits 1."""

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except (UsageError, RunError) as error:
            print(f"trainstack {args.command}: {str(error).rstrip('.')}.", file=sys.stderr)
            return 2 if isinstance(error, UsageError) else 1
        except (BotoCoreError, ClientError) as error:
            print(f"trainstack: AWS call failed: {error}", file=sys.stderr)
            return 1

    return run
