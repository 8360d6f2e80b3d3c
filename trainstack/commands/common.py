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
from botocore.exceptions import BotoCoreError, ClientError

from trainstack.config import ConfigError, Settings, load_settings
from trainstack.queue import training_queue_name
from trainstack.runs import Job, QueuedJob, RunError, find_state_machine, run_job

DEFAULT_POLL_SECONDS = 15.0


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
    """--config, --region and --state-machine-arn: where the pipeline of a deployed config is."""
    add_config_argument(parser)
    parser.add_argument("--region", help="AWS region (default: the config's)")
    parser.add_argument("--state-machine-arn", help="skip the CloudFormation lookup of the pipeline stack")


def add_poll_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--poll-seconds", type=float, default=DEFAULT_POLL_SECONDS, help=argparse.SUPPRESS)


@dataclass
class Pipeline:
    """The deployed pipeline a command talks to, with boto3 clients in its region."""

    settings: Settings
    region: str
    given_state_machine_arn: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Pipeline:
        try:
            settings = load_settings(args.config)
        except ConfigError as error:
            raise UsageError(f"--config: {error}".rstrip(".")) from None
        return cls(settings, args.region or settings.region, getattr(args, "state_machine_arn", None))

    def client(self, service: str) -> Any:
        return boto3.client(service, region_name=self.region)

    def job_of(self, run_name: str) -> Job | QueuedJob | None:
        """The run's job: waiting in the queue (queue mode), else its newest training job, else None."""
        if not self.settings.queue.enabled:
            return run_job(self.client("sagemaker"), None, None, run_name)
        queue = training_queue_name(self.settings.project)
        return run_job(self.client("sagemaker"), self.client("batch"), queue, run_name)

    def training_job_of(self, run_name: str) -> Job | None:
        """The run's newest training job (queue mode: the one Batch started), else None."""
        job = self.job_of(run_name)
        return job if isinstance(job, Job) else None

    @cached_property
    def state_machine_arn(self) -> str:
        return self.given_state_machine_arn or find_state_machine(
            self.client("cloudformation"), self.settings.project, self.region
        )


def usage_failure(args: argparse.Namespace, error: Exception) -> int:
    print(f"trainstack {args.command}: {str(error).rstrip('.')}.", file=sys.stderr)
    return 2


def failure(args: argparse.Namespace, error: Exception) -> int:
    print(f"trainstack {args.command}: {str(error).rstrip('.')}.", file=sys.stderr)
    return 1


def aws_failure(error: Exception) -> int:
    print(f"trainstack: AWS call failed: {error}", file=sys.stderr)
    return 1


def one_line_failures(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A command's handler whose failures end in one line: bad input exits 2, a failed run or a refused
    AWS call exits 1."""

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except UsageError as error:
            return usage_failure(args, error)
        except RunError as error:
            return failure(args, error)
        except (BotoCoreError, ClientError) as error:
            return aws_failure(error)

    return run
