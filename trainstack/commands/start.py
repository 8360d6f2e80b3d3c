"""`trainstack start`: validate a retraining request like the state machine does and start it.

    trainstack start --profile llama-7b-smp --hp learning_rate=3e-4 --run-name trainstack-llama-v2 --wait
    trainstack start --profile small-torchrun --code ./my-model --entry fit.py    (the team's own code)

Bad input ends in one sentence naming the flag and exit code 2, before any AWS call. The execution
is named after the run (see trainstack.runs); starting a run that ended again resumes it from its
checkpoints, starting one that is still running is refused. The state machine is the
`StateMachineArn` output of the `<project>-pipeline` stack unless --state-machine-arn names it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from trainstack.commands.common import Pipeline, UsageError, add_pipeline_command, one_line_failures
from trainstack.commands.status import follow
from trainstack.execution_input import InvalidInputError, default_run_name, validate_execution_input
from trainstack.input_rules import RunConfig
from trainstack.planning.setups import plan_lines
from trainstack.prices import offline_training_prices
from trainstack.profiles import Profile
from trainstack.runs import execution_arn_for, executions_of, next_execution_name, stack_output
from trainstack.service_quotas import quota_lines, service_quotas_client
from trainstack.team_code import CODE_PREFIX_OUTPUT, Bundle, pack, upload

# Input field -> the flag that sets it, so messages name what the user typed.
FLAGS = {
    "": "--config",
    "profile": "--profile",
    "runName": "--run-name",
    "hyperparameters": "--hp",
    "instanceCount": "--instance-count",
    "maxRuntimeHours": "--max-runtime-hours",
    "resumeFrom": "--resume-from",
    "code": "--code",
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    add_pipeline_command(
        subparsers,
        "start",
        run,
        description="Start a retraining (a pipeline execution).",
        polls=True,
        arguments=_request_arguments,
    )


def _request_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that build the execution input (FLAGS), and --wait."""
    parser.add_argument("--profile", help="profile from the config (default: the first one)")
    parser.add_argument(
        "--hp",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="hyperparameter for train.py, repeatable; overrides the profile's default",
    )
    parser.add_argument(
        "--run-name",
        help="<project>-...; names the execution, jobs, checkpoints and "
        "artifacts (default: <project>-<profile>-<UTC time>); start an ended run again "
        "to resume it from its checkpoints",
    )
    parser.add_argument("--instance-count", type=int, help="instances, for every instance preference")
    parser.add_argument("--max-runtime-hours", type=float, help="maximum runtime of each training job")
    parser.add_argument("--resume-from", metavar="S3_URI", help="checkpoint prefix to start from")
    parser.add_argument(
        "--code",
        metavar="DIR",
        type=Path,
        help="run the team's own code: DIR is packed, uploaded by its sha256 to the team's code prefix, its "
        "--entry launched as the profile launches train.py (docs/own-code.md)",
    )
    parser.add_argument(
        "--entry",
        metavar="FILE",
        help="entry point in --code DIR (default: the profile's code.entry_point, else its entry_point)",
    )
    parser.add_argument(
        "--code-prefix",
        metavar="S3_URI",
        help="where --code uploads (default: the pipeline stack's CodePrefix output)",
    )
    parser.add_argument("--wait", action="store_true", help="follow the run; non-zero exit if it fails")


@one_line_failures
def run(args: argparse.Namespace) -> int:
    pipeline = Pipeline.from_args(args)
    try:
        execution_input = build_input(args, pipeline.runs)
        bundle = _team_code(args, pipeline.runs, execution_input)
        validate_execution_input(execution_input, pipeline.runs)
    except InvalidInputError as error:
        raise UsageError(f"{FLAGS[error.field]}: {error}") from None
    if bundle is not None:
        _upload_code(pipeline, args.code_prefix, bundle)
    execution_arn = start_run(pipeline, execution_input)
    print(execution_arn)
    profile = pipeline.runs.profile(execution_input["profile"])
    prices = offline_training_prices(pipeline.region)  # as the pipeline's cost cap prices the run
    for line in plan_lines(
        profile, execution_input.get("hyperparameters"), execution_input.get("instanceCount"), prices
    ):
        print(line, file=sys.stderr)
    quotas = service_quotas_client(pipeline.region)
    for line in quota_lines(quotas, profile, execution_input.get("instanceCount")):
        print(line, file=sys.stderr)
    if not args.wait:
        return 0
    return follow(pipeline, execution_arn, poll_seconds=args.poll_seconds)


def start_run(pipeline: Pipeline, execution_input: dict[str, Any]) -> str:
    """StartExecution named after the run; a run that ended gets its next execution name."""
    stepfunctions = pipeline.client("stepfunctions")
    run_name = execution_input["runName"]
    state_machine_arn = pipeline.state_machine_arn
    # StartExecution with a running execution's name and input returns that execution: look first.
    try:
        stepfunctions.describe_execution(executionArn=execution_arn_for(state_machine_arn, run_name))
    except ClientError as error:
        if error.response["Error"]["Code"] != "ExecutionDoesNotExist":
            raise
        name = run_name
    else:
        name = next_execution_name(run_name, executions_of(stepfunctions, state_machine_arn, run_name))
        print(
            f"run {run_name} ran before: this execution ({name}) resumes from its checkpoints",
            file=sys.stderr,
        )
    return stepfunctions.start_execution(
        stateMachineArn=state_machine_arn, name=name, input=json.dumps(execution_input)
    )["executionArn"]


def _team_code(
    args: argparse.Namespace, settings: RunConfig, execution_input: dict[str, Any]
) -> Bundle | None:
    """--code DIR packed, its digest and --entry (default: the profile's `code.entry_point`, else its
    entry_point) set as the input's `code`; None without --code."""
    if args.code is None:
        if args.entry is not None or args.code_prefix is not None:
            raise UsageError("--entry and --code-prefix name the team's own code: give --code DIR too")
        return None
    try:
        bundle = pack(args.code)
    except (OSError, ValueError) as error:
        raise UsageError(f"--code: {error}") from None
    profiles = {profile.name: profile for profile in settings.profiles}
    chosen = profiles.get(execution_input["profile"])
    entry = args.entry or (default_entry(chosen) if chosen else "train.py")
    if not (args.code / entry).is_file():
        raise UsageError(f"--entry: {entry} is not a file of {args.code}")
    execution_input["code"] = {"digest": bundle.digest, "entry": entry}
    return bundle


def default_entry(profile: Profile) -> str:
    """--entry's default: the profile's `code.entry_point`, else its entry_point."""
    return profile.code.entry_point if profile.code else profile.entry_point


def _upload_code(pipeline: Pipeline, code_prefix: str | None, bundle: Bundle) -> None:
    """The bundle at its content address in the team's code prefix, unless it is there already."""
    prefix = code_prefix or stack_output(
        pipeline.client("cloudformation"),
        f"{pipeline.runs.project}-pipeline",
        CODE_PREFIX_OUTPUT,
        pipeline.region,
        "--code-prefix",
    )
    uri, uploaded = upload(pipeline.client("s3"), prefix, bundle)
    done = "uploaded to" if uploaded else "already in"
    print(f"code {bundle.digest} ({bundle.files} files) {done} {uri}", file=sys.stderr)


def build_input(args: argparse.Namespace, settings: RunConfig) -> dict[str, Any]:
    """The execution input the flags describe; the run name is always set, so --wait can find the jobs."""
    hyperparameters = {}
    for pair in args.hp:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise InvalidInputError(
                f"expected NAME=VALUE such as learning_rate=3e-4, got '{pair}'.", "hyperparameters"
            )
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
