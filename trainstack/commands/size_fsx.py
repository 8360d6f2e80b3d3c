"""`trainstack size-fsx`: print the cheapest FSx for Lustre configuration for a dataset and a read need."""

from __future__ import annotations

import argparse
import json
import math
import sys

from trainstack.fsx_sizing import (
    DEPLOYMENT_TYPES,
    FsxPlan,
    FsxSizingError,
    quota_warning,
    size_fsx,
    within_default_quota,
)
from trainstack.prices import FSX_LUSTRE_PRICES

# size_fsx parameter -> the flag that sets it, so errors name what the user typed.
_FLAGS = {
    "dataset_gib": "--dataset-gib",
    "throughput_mbps": "--throughput-mbps",
    "epoch_seconds": "--epoch-seconds",
    "deployment_type": "--deployment-type",
}


class _UsageError(Exception):
    """Bad flags: one sentence naming the flag and what is allowed."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    summary = "print the cheapest FSx for Lustre configuration for a dataset and a read need"
    parser = subparsers.add_parser("size-fsx", help=summary, description=summary)
    # Values are checked by run() (not argparse) so every mistake gets one sentence naming the flag.
    parser.add_argument("--dataset-gib", metavar="GIB", help="dataset size in GiB (required)")
    parser.add_argument("--throughput-mbps", metavar="MBPS", help="read throughput the jobs need, MB/s")
    parser.add_argument("--epoch-seconds", metavar="SECONDS", help="seconds to read the whole dataset once")
    parser.add_argument(
        "--deployment-type", metavar="TYPE", help=f"only consider {' or '.join(DEPLOYMENT_TYPES)}"
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        plan = _plan(args)
    except _UsageError as error:
        print(f"trainstack size-fsx: {error}", file=sys.stderr)
        return 2
    if args.json:
        document = plan.to_dict()
        if plan.above_default_quota:
            alternative = within_default_quota(plan, _deployment_type(args))
            document["within_default_quota"] = alternative.to_dict() if alternative else None
        print(json.dumps(document, indent=2))
    else:
        print(_table(plan, args))
    return 0


def _plan(args: argparse.Namespace) -> FsxPlan:
    if args.dataset_gib is None:
        raise _UsageError("--dataset-gib is required: give the dataset size in GiB, a number above 0.")
    if (args.throughput_mbps is None) == (args.epoch_seconds is None):
        raise _UsageError(
            "give exactly one of --throughput-mbps (MB/s the jobs read) "
            "or --epoch-seconds (seconds one epoch may take to read the dataset)."
        )
    deployment_type = _deployment_type(args)
    try:
        return size_fsx(
            _number(args.dataset_gib, "--dataset-gib", "a size in GiB"),
            throughput_mbps=_number(args.throughput_mbps, "--throughput-mbps", "a rate in MB/s"),
            epoch_seconds=_number(args.epoch_seconds, "--epoch-seconds", "a duration in seconds"),
            deployment_type=deployment_type,
        )
    except FsxSizingError as error:
        raise _UsageError(f"{error.named(_FLAGS[error.parameter])}.") from None


def _deployment_type(args: argparse.Namespace) -> str | None:
    return args.deployment_type.upper() if args.deployment_type else None


def _number(text: str | None, flag: str, what: str) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise _UsageError(f"{flag}: {text!r} is not {what}; give a number above 0.")
    return value


def _table(plan: FsxPlan, args: argparse.Namespace) -> str:
    need = f"{plan.required_mbps:,.0f} MB/s"
    if args.epoch_seconds is not None:
        need = f"{plan.dataset_gib:,g} GiB read every {float(args.epoch_seconds):g} s = {need}"
    per_unit = (
        f"{plan.per_unit_storage_throughput} MB/s/TiB"
        if plan.per_unit_storage_throughput is not None
        else "- (scratch: 200 MB/s/TiB baseline)"
    )
    rows = [
        ("need", need),
        ("deployment type", plan.deployment_type),
        ("storage capacity", f"{plan.storage_capacity_gib:,} GiB (dataset {plan.dataset_gib:,g} GiB)"),
        ("per-unit throughput", per_unit),
        ("baseline throughput", f"{plan.throughput_mbps:,.0f} MB/s"),
        ("RAM cache", f"{plan.ram_cache_gib:,g} GiB"),
        (
            "monthly cost",
            f"${plan.monthly_cost_usd:,.2f} ({FSX_LUSTRE_PRICES.region} prices of {FSX_LUSTRE_PRICES.as_of})",
        ),
    ]
    warning = quota_warning(plan, _deployment_type(args))
    if warning:
        rows.append(("note", warning))
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)
