"""`trainstack start`: validate a retraining request like the state machine does and start it.

    trainstack start --profile llama-7b-smp --hp learning_rate=3e-4 --run-name trainstack-llama-v2 --wait

Bad input ends in one sentence naming the flag and exit code 2, before any AWS call. The state
machine is the `StateMachineArn` output of the `<project>-pipeline` stack unless
--state-machine-arn names it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from trainstack.commands.status import add_poll_argument, aws_failure, follow, one_sentence_errors
from trainstack.config import ConfigError, Settings, load_settings
from trainstack.execution_input import InvalidInputError, default_run_name, validate_execution_input

STATE_MACHINE_OUTPUT = "StateMachineArn"
# Input field -> the flag that sets it, so messages name what the user typed.
FLAGS = {
    "": "--config",
    "profile": "--profile",
    "runName": "--run-name",
    "hyperparameters": "--hp",
    "instanceCount": "--instance-count",
    "maxRuntimeHours": "--max-runtime-hours",
    "resumeFrom": "--resume-from",
}


class StartError(Exception):
    """Starting failed for a reason other than bad input (no stack, no output); exit code 1."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("start", help="start a training pipeline execution")
    parser.add_argument("--profile", help="profile from the config (default: the first one)")
    parser.add_argument("--hp", action="append", default=[], metavar="NAME=VALUE",
                        help="hyperparameter for train.py, repeatable; overrides the profile's default")
    parser.add_argument("--run-name", help="<project>-...; names jobs, checkpoints and artifacts "
                        "(default: <project>-<profile>-<UTC time>); reuse a run name to resume that run")
    parser.add_argument("--instance-count", type=int, help="instances, for every instance preference")
    parser.add_argument("--max-runtime-hours", type=float, help="maximum runtime of each training job")
    parser.add_argument("--resume-from", metavar="S3_URI", help="checkpoint prefix to start from")
    parser.add_argument("--wait", action="store_true", help="follow the execution; non-zero exit if it fails")
    parser.add_argument("--state-machine-arn", help="skip the CloudFormation lookup")
    parser.add_argument("--config", help="config file (default: config/default.yaml)")
    parser.add_argument("--region", help="AWS region (default: the config's)")
    add_poll_argument(parser)
    parser.set_defaults(handler=run)
    one_sentence_errors(parser)


def run(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
    except ConfigError as error:
        print(f"trainstack start: --config: {error}", file=sys.stderr)
        return 2
    try:
        execution_input = build_input(args, settings)
        validate_execution_input(execution_input, settings)
    except InvalidInputError as error:
        print(f"trainstack start: {FLAGS[error.field]}: {error}", file=sys.stderr)
        return 2
    region = args.region or settings.region
    try:
        state_machine_arn = args.state_machine_arn or find_state_machine(settings, region)
        execution = boto3.client("stepfunctions", region_name=region).start_execution(
            stateMachineArn=state_machine_arn, input=json.dumps(execution_input)
        )
    except StartError as error:
        print(f"trainstack start: {error}", file=sys.stderr)
        return 1
    except (BotoCoreError, ClientError) as error:
        return aws_failure(error)
    print(execution["executionArn"])
    if not args.wait:
        return 0
    try:
        return follow(execution["executionArn"], region, settings.project, poll_seconds=args.poll_seconds)
    except (BotoCoreError, ClientError) as error:
        return aws_failure(error)


def build_input(args: argparse.Namespace, settings: Settings) -> dict[str, Any]:
    """The execution input the flags describe; the run name is always set, so --wait can find the jobs."""
    hyperparameters = {}
    for pair in args.hp:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise InvalidInputError(f"expected NAME=VALUE such as learning_rate=3e-4, got '{pair}'.",
                                    "hyperparameters")
        hyperparameters[name] = value
    profile = args.profile or (settings.profiles[0].name if settings.profiles else "")
    execution_input: dict[str, Any] = {
        "profile": profile,
        "runName": args.run_name or default_run_name(settings, profile),
    }
    optional = {
        "hyperparameters": hyperparameters or None,
        "instanceCount": args.instance_count,
        "maxRuntimeHours": args.max_runtime_hours,
        "resumeFrom": args.resume_from,
    }
    execution_input.update({field: value for field, value in optional.items() if value is not None})
    return execution_input


def find_state_machine(settings: Settings, region: str) -> str:
    """The StateMachineArn output of the `<project>-pipeline` stack."""
    stack = f"{settings.project}-pipeline"
    try:
        stacks = boto3.client("cloudformation", region_name=region).describe_stacks(StackName=stack)["Stacks"]
    except ClientError as error:
        if "does not exist" in str(error):
            raise StartError(
                f"stack {stack} does not exist in {region}; deploy it (cdk deploy {stack}) "
                "or pass --state-machine-arn"
            ) from None
        raise
    for output in stacks[0].get("Outputs", []):
        if output["OutputKey"] == STATE_MACHINE_OUTPUT:
            return output["OutputValue"]
    raise StartError(f"stack {stack} has no {STATE_MACHINE_OUTPUT} output; pass --state-machine-arn")
