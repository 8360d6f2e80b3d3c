"""`trainstack plan`: will a profile (or a model on an instance type) fit, how fast, how long, how much.

    trainstack plan --profile llama-7b-smp
    trainstack plan --model-preset 13b --instance-type ml.p4d.24xlarge --instance-count 2 --recommend

Formulas, assumptions and sources: docs/plan.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from datetime import UTC, datetime

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from training_scripts.model_shapes import PRESETS
from trainstack.commands import plan_goodput, plan_text
from trainstack.commands.common import Pipeline
from trainstack.config_loading import ConfigError, load_settings
from trainstack.instances import INSTANCE_TYPES, InstanceType
from trainstack.planning.auto_interval import auto_interval, is_auto
from trainstack.planning.checkpoints import ASSUMED_WRITE_BYTES_PER_SECOND, GB
from trainstack.planning.plan_window import PlanWindow, read_window, window_line
from trainstack.planning.plans import Plan, Setup, plan, recommend
from trainstack.planning.setups import (
    TRAIN_DEFAULTS,
    UnplannableError,
    as_mapping,
    preset_shape,
    profile_token_budget,
    setup_for_profile,
    shape_from_config_json,
)
from trainstack.planning.throughput import MFU_AS_OF
from trainstack.price_list import plan_prices
from trainstack.profiles import Profile
from trainstack.report.history import FailureHistory, pipeline_history
from trainstack.runs import RunError
from trainstack.service_quotas import QUICK, quota_lines, service_quotas_client

_STRATEGIES = ("smp", "smddp", "torchrun")
_PARALLELISMS = ("fsdp", "ddp")
_SUFFIXES = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


class _UsageError(Exception):
    """Bad flags: one sentence naming the flag and what is allowed."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    summary = "memory per GPU, fit, tokens/s, time and cost of a profile or a model on an instance type"
    description = (
        f"{summary}. Reads AWS where credentials allow, read-only: the AWS Price List API for prices "
        "(pricing:GetProducts; without credentials, trainstack's dated offline table), and with --profile "
        "the account's Service Quotas (service-quotas:ListServiceQuotas) and the profile's training plans "
        "(sagemaker:DescribeTrainingPlan); --from-history reads the pipeline's executions, jobs and logs. "
        "Each read that fails is named and skipped."
    )
    parser = subparsers.add_parser("plan", help=summary, description=description)
    add = parser.add_argument
    # Values are checked by run() (not argparse) so every mistake gets one sentence naming the flag.
    add("--config", help="config file with the profile (default: config/default.yaml)")
    add("--profile", help="plan this profile of the config, one line per instance preference")
    add("--model-preset", metavar="NAME", help=f"model preset: {', '.join(PRESETS)}")
    add("--init-from", metavar="DIR", help="directory with the model's config.json (instead of a preset)")
    add("--instance-type", metavar="TYPE", help="instance type (with --profile: instead of its preferences)")
    add("--instance-count", metavar="N", help="instances (default 1, or the profile's)")
    add("--seq-len", metavar="N", help="tokens per sequence (default: the profile's, else train.py's 1024)")
    add("--micro-batch-size", metavar="N", help="sequences per GPU per forward pass")
    add("--activation-checkpointing", metavar="BOOL", help="true or false")
    add("--strategy", metavar="NAME", help=f"without --profile: {', '.join(_STRATEGIES)} (default torchrun)")
    add("--parallelism", metavar="NAME", help="outside SMP: fsdp (default) or ddp")
    add("--hybrid-shard-degree", metavar="N", help="SMP: GPUs a parameter is sharded over (0: all)")
    add("--tokens", metavar="N", help="token budget for time and cost, e.g. 2e9 or 2B (default: max_steps)")
    add(
        "--checkpoint-write-rate",
        metavar="GB/S",
        help="one node's checkpoint write rate, as benchmarks/checkpoint_throughput.py measures it there "
        "(default: an assumed 1 GB/s)",
    )
    add("--recommend", action="store_true", help="recommend SMP sharding and checkpointing for each type")
    plan_goodput.add_arguments(parser)
    add("--json", action="store_true", help="print the plans as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        setup, targets, budget, profile = _inputs(args)
        write_rate = _write_rate(args.checkpoint_write_rate)
        goodput = plan_goodput.inputs(args, profile, _history)
    except (_UsageError, plan_goodput.GoodputUsageError) as error:
        print(f"trainstack plan: {error}", file=sys.stderr)
        return 2
    prices = plan_prices(_region(args), [spec.name for spec, _, _ in targets])
    plans = [plan(setup, spec, count, tokens, write_rate, prices) for spec, count, tokens in targets]
    recommended = (
        [recommend(setup, spec, count, tokens, prices) for spec, count, tokens in targets]
        if args.recommend
        else []
    )
    if args.json:
        document = {"setup": as_mapping(setup), "plans": [item.as_dict() for item in plans]}
        if args.recommend:
            document["recommended"] = [item and plan_text.recommendation(item) for item in recommended]
        document["goodput"] = plan_goodput.as_dict(setup, plans, goodput, write_rate)
        if profile and is_auto(profile) and not args.instance_type:
            document["goodput"]["auto_interval_steps"] = auto_interval(profile)
        document["assumptions"] = {"mfu_as_of": MFU_AS_OF.isoformat(), "prices": prices.as_dict()}
        print(json.dumps(document, indent=2))
    else:
        print(
            "\n".join(
                [
                    plan_text.report(setup, plans, recommended, budget, prices),
                    *plan_goodput.lines(setup, plans, goodput, write_rate),
                    *([] if args.instance_type else plan_goodput.auto_lines(profile)),
                ]
            )
        )
    if args.profile and not args.instance_type:
        for line in [*_quota_lines(args), *_training_plan_lines(args, profile, plans, goodput)]:
            print(line, file=sys.stderr)
    return 0 if all(item.fits for item in plans) else 1


def _region(args: argparse.Namespace) -> str | None:
    """The config's region: where the plan is priced."""
    try:
        return load_settings(args.config).region
    except ConfigError as error:
        raise _UsageError(f"--config: {error}".rstrip(".") + ".") from None


def _quota_lines(args: argparse.Namespace) -> list[str]:
    """The profile's instance counts against the account's quotas (trainstack.service_quotas)."""
    profile = _profile(args)
    count = _positive(args.instance_count, "--instance-count") if args.instance_count else None
    settings = load_settings(args.config)
    return quota_lines(service_quotas_client(settings.region), profile, count)


def sagemaker_client(region: str):
    return boto3.client("sagemaker", region_name=region, config=QUICK)


def _training_plan_lines(
    args: argparse.Namespace, profile: Profile, plans: list[Plan], goodput: plan_goodput.GoodputInputs
) -> list[str]:
    """Per preference with a training plan: whether the run fits the plan's window (DescribeTrainingPlan)."""
    arns = [
        arn
        for preference, arn in zip(profile.instance_preferences, profile.training_plan_arns, strict=True)
        if preference.spec.gpus
    ]
    if not any(arns):
        return []
    sagemaker = sagemaker_client(load_settings(args.config).region)
    now = datetime.now(UTC)
    lines = []
    for item, arn, result in zip(plans, arns, plan_goodput.forecasts(plans, goodput), strict=True):
        if not arn:
            continue
        window = read_window(sagemaker, arn)
        if not isinstance(window, PlanWindow):
            lines.append(window)
        elif result is None or item.throughput is None or item.throughput.hours is None:
            lines.append(f"training plan {arn} not checked: no time estimate for {item.spec.name}")
        else:
            hours = item.throughput.hours / result.wall_clock.kept
            lines.append(window_line(window, hours, result.wall_clock.percent, now))
    return lines


def _inputs(
    args: argparse.Namespace,
) -> tuple[Setup, list[tuple[InstanceType, int, float | None]], str, Profile | None]:
    """(setup, [(type, count, tokens)], budget description, the profile if one) from the flags."""
    tokens = _tokens(args.tokens)
    count = _positive(args.instance_count, "--instance-count") if args.instance_count else None
    profile = None
    if args.profile:
        if args.model_preset or args.init_from:
            raise _UsageError("--profile plans the profile's own model: drop --model-preset/--init-from.")
        profile = _profile(args)
        try:
            setup = setup_for_profile(profile)
        except UnplannableError as error:
            raise _UsageError(f"--profile: {error}.") from None
        setup = _overrides(setup, args)
        preferences = [(p.spec, count or p.instance_count) for p in profile.instance_preferences]
        if args.instance_type:
            preferences = [(_instance_type(args.instance_type), count or 1)]
        targets = [
            (spec, n, tokens or profile_token_budget(profile, setup, n, spec))
            for spec, n in preferences
            if spec.gpus
        ]
        budget = f"{tokens:,.0f} tokens" if tokens else "the profile's max_steps"
    else:
        setup = _overrides(_explicit_setup(args), args)
        if not args.instance_type:
            raise _UsageError("--instance-type is required without --profile (or give --profile NAME).")
        spec = _instance_type(args.instance_type)
        targets = [(spec, count or 1, tokens)] if spec.gpus else []
        budget = f"{tokens:,.0f} tokens" if tokens else "no token budget (give --tokens)"
    if not targets:
        raise _UsageError("--instance-type: plan a GPU type; CPU types train no model worth planning.")
    return setup, targets, budget, profile


def _history(args: argparse.Namespace) -> FailureHistory:
    """--from-history: the failure rate of the pipeline's past runs (boto3, the config's region)."""
    try:
        settings = load_settings(args.config)
    except ConfigError as error:
        raise _UsageError(f"--config: {error}".rstrip(".") + ".") from None
    try:
        return pipeline_history(Pipeline(settings, settings.region))
    except (RunError, BotoCoreError, ClientError) as error:
        raise _UsageError(
            f"--from-history: cannot read the pipeline's runs: {error}".rstrip(".") + "."
        ) from None


def _profile(args: argparse.Namespace) -> Profile:
    try:
        settings = load_settings(args.config)
    except ConfigError as error:
        raise _UsageError(f"--config: {error}".rstrip(".") + ".") from None
    names = [profile.name for profile in settings.profiles]
    if args.profile not in names:
        raise _UsageError(f"--profile must be one of the config's profiles: {', '.join(names)}.")
    return settings.profiles[names.index(args.profile)]


def _explicit_setup(args: argparse.Namespace) -> Setup:
    if args.model_preset and args.init_from:
        raise _UsageError("--model-preset and --init-from exclude each other: give one.")
    if args.init_from:
        try:
            shape = shape_from_config_json(args.init_from)
        except UnplannableError as error:
            raise _UsageError(f"{error}.") from None
        model = args.init_from
    else:
        model = args.model_preset or TRAIN_DEFAULTS["model_preset"]
        if model not in PRESETS:
            raise _UsageError(f"--model-preset must be one of {', '.join(PRESETS)}.")
        shape = preset_shape(model)
    strategy = args.strategy or "torchrun"
    if strategy not in _STRATEGIES:
        raise _UsageError(f"--strategy must be one of {', '.join(_STRATEGIES)}.")
    return Setup(
        model=model,
        shape=shape,
        seq_len=TRAIN_DEFAULTS["seq_len"],
        micro_batch_size=TRAIN_DEFAULTS["micro_batch_size"],
        grad_accum=1,
        activation_checkpointing=False,
        strategy=strategy,
        parallelism=TRAIN_DEFAULTS["parallelism"],
    )


def _overrides(setup: Setup, args: argparse.Namespace) -> Setup:
    changes: dict = {}
    if args.seq_len:
        changes["seq_len"] = _positive(args.seq_len, "--seq-len")
    if args.micro_batch_size:
        changes["micro_batch_size"] = _positive(args.micro_batch_size, "--micro-batch-size")
    if args.activation_checkpointing:
        if args.activation_checkpointing.lower() not in ("true", "false"):
            raise _UsageError("--activation-checkpointing must be true or false.")
        changes["activation_checkpointing"] = args.activation_checkpointing.lower() == "true"
    if args.parallelism:
        if args.parallelism not in _PARALLELISMS:
            raise _UsageError(f"--parallelism must be one of {', '.join(_PARALLELISMS)}.")
        changes["parallelism"] = args.parallelism
    if args.hybrid_shard_degree:
        changes["hybrid_shard_degree"] = _non_negative(args.hybrid_shard_degree, "--hybrid-shard-degree")
    setup = replace(setup, **changes)
    if setup.strategy != "smp" and args.hybrid_shard_degree:
        raise _UsageError("--hybrid-shard-degree applies only to strategy smp.")
    return setup


def _instance_type(name: str) -> InstanceType:
    if name not in INSTANCE_TYPES:
        raise _UsageError(f"--instance-type must be one of {', '.join(sorted(INSTANCE_TYPES))}.")
    return INSTANCE_TYPES[name]


def _positive(text: str, flag: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise _UsageError(f"{flag} must be a whole number of at least 1, got '{text}'.")
    return int(text)


def _non_negative(text: str, flag: str) -> int:
    if not text.isdigit():
        raise _UsageError(f"{flag} must be a whole number of at least 0, got '{text}'.")
    return int(text)


def _write_rate(text: str | None) -> float:
    if text is None:
        return ASSUMED_WRITE_BYTES_PER_SECOND
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise _UsageError(
            f"--checkpoint-write-rate must be a positive number of GB/s such as 1.5, got '{text}'."
        )
    return value * GB


def _tokens(text: str | None) -> float | None:
    if text is None:
        return None
    number, scale = text, 1.0
    if text[-1:].upper() in _SUFFIXES:
        number, scale = text[:-1], _SUFFIXES[text[-1].upper()]
    try:
        value = float(number) * scale
    except ValueError:
        value = 0.0
    if not value >= 1:
        raise _UsageError(
            f"--tokens must be a number of tokens of at least 1, such as 2e9 or 2B, got '{text}'."
        )
    return value
