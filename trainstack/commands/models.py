"""`trainstack models [--profile P]`: the registered versions with their evaluation loss, status and lineage;
`trainstack approve|reject VERSION --reason ...`: a person's decision on one (docs/registry.md)."""

from __future__ import annotations

import argparse
import getpass
import re

from trainstack.commands.common import Pipeline, UsageError, add_pipeline_command, one_line_failures
from trainstack.model_versions import VERSION_ARN, decide, registered_profiles, versions
from trainstack.registry import group_name
from trainstack.registry_settings import APPROVED, REJECTED

DECISIONS = {"approve": APPROVED, "reject": REJECTED}
# The pipeline's state machine names the partition (aws, aws-cn, aws-us-gov), region and account that its
# model package groups live in.
STATE_MACHINE_ARN = re.compile(
    r"^arn:(?P<partition>aws[a-z-]*):states:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):stateMachine:[^:]+$"
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    def profile(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--profile", help="a profile with a registry: block (default: all of them)")

    def decision(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "version", metavar="VERSION", help="a version number of --profile's group, or its ARN"
        )
        parser.add_argument("--reason", required=True, help="why: kept in the version's ApprovalDescription")
        profile(parser)

    add_pipeline_command(
        subparsers,
        "models",
        list_versions,
        description="List the model package versions of the profiles' groups: evaluation loss, approval "
        "status and why, and the lineage each carries (run, execution, jobs, image, config, data).",
        arguments=profile,
    )
    for name in DECISIONS:
        add_pipeline_command(
            subparsers,
            name,
            decide_version,
            description=f"{name.capitalize()} a model package version, recording who and --reason.",
            arguments=decision,
        )


@one_line_failures
def list_versions(args: argparse.Namespace) -> int:
    pipeline = Pipeline.from_args(args)
    profiles = registered_profiles(pipeline.runs)
    if args.profile is not None and args.profile not in profiles:
        raise UsageError(
            f"--profile: '{args.profile}' has no registry: block; choose one of {', '.join(profiles)}"
        )
    found = versions(pipeline.client("sagemaker"), pipeline.runs, args.profile)
    if not found:
        print("no registered versions yet")
    for version in found:
        print(
            f"{version.group} v{version.number}  {version.status:<21}  eval loss {version.loss}  "
            f"{version.description}"
        )
        for key, value in sorted(version.lineage.items()):
            print(f"    {key} = {value}")
    return 0


@one_line_failures
def decide_version(args: argparse.Namespace) -> int:
    pipeline = Pipeline.from_args(args)
    arn = version_arn(pipeline, args.version, args.profile)
    if not args.reason.strip():
        raise UsageError("--reason: say why, in a few words")
    status = DECISIONS[args.command]
    decide(pipeline.client("sagemaker"), arn, status, args.reason.strip(), getpass.getuser())
    print(f"{arn} is now {status}")
    return 0


def version_arn(pipeline: Pipeline, version: str, profile: str | None) -> str:
    """VERSION as a model package ARN: an ARN as given, or a number in --profile's group (the only
    registered profile's when there is one), in the partition, region and account of the pipeline's state
    machine."""
    if VERSION_ARN.match(version):
        return version
    if not version.isdigit() or int(version) < 1:
        raise UsageError(
            f"VERSION: '{version}' is neither a version number (1, 2, ...) nor a model package ARN"
        )
    choices = registered_profiles(pipeline.runs)
    if profile is None and len(choices) == 1:
        profile = choices[0]
    if profile not in choices:
        raise UsageError(f"--profile: give one of the profiles with a registry: block ({', '.join(choices)})")
    machine = STATE_MACHINE_ARN.match(pipeline.state_machine_arn)
    if machine is None:
        raise UsageError(
            f"--state-machine-arn: '{pipeline.state_machine_arn}' is not a Step Functions state machine ARN "
            "(arn:<partition>:states:<region>:<account>:stateMachine:<name>)"
        )
    partition, region, account = machine.group("partition", "region", "account")
    group = group_name(pipeline.runs.project, profile)
    return f"arn:{partition}:sagemaker:{region}:{account}:model-package/{group}/{version}"
