"""`trainstack plan`'s goodput forecast: per instance preference the job's MTBF, the checkpoint interval that
maximizes expected goodput, the goodput and its parts; the same model at 16 to 16,384 GPUs; below the goal,
the lever that helps most (docs/plan.md, "Goodput")."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

from trainstack.fault_model import FaultModel
from trainstack.planning.forecast import (
    DEFAULT_GOAL_PERCENT,
    SCALES,
    Forecast,
    asynchronous_saves,
    at_scales,
    forecast,
    levers,
)
from trainstack.planning.plans import Plan, Setup


class GoodputUsageError(Exception):
    """A bad goodput flag: one sentence naming it."""


@dataclass(frozen=True)
class GoodputInputs:
    faults: FaultModel
    asynchronous: bool
    goal: float
    history: str | None  # what --from-history rests on, for the report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--gpu-mtbf-hours",
        metavar="H",
        help="one GPU's mean time between job interruptions (default: the "
        "profile's fault_model, else Llama 3's 50,677 h)",
    )
    add(
        "--from-history",
        action="store_true",
        help="estimate the GPU MTBF from this account's past runs "
        "(infrastructure failures per GPU-hour; reads the pipeline's executions, jobs and logs)",
    )
    add(
        "--async-checkpoint",
        metavar="BOOL",
        help="async saves, true or false (default: the profile's async_checkpoint, else false)",
    )
    add("--goodput-goal", metavar="PERCENT", help=f"goodput to aim for (default {DEFAULT_GOAL_PERCENT:g})")


def inputs(args: argparse.Namespace, profile, estimate) -> GoodputInputs:
    """The fault model, async flag and goal from the flags and the profile; `estimate(args)` reads history."""
    faults = profile.fault_model if profile else FaultModel()
    asynchronous = asynchronous_saves(profile.hyperparameters) if profile else False
    if args.async_checkpoint:
        if args.async_checkpoint.lower() not in ("true", "false"):
            raise GoodputUsageError("--async-checkpoint must be true or false.")
        asynchronous = args.async_checkpoint.lower() == "true"
    history = None
    if args.gpu_mtbf_hours and args.from_history:
        raise GoodputUsageError("--gpu-mtbf-hours and --from-history exclude each other: give one.")
    if args.gpu_mtbf_hours:
        faults = FaultModel(gpu_mtbf_hours=_positive_number(args.gpu_mtbf_hours, "--gpu-mtbf-hours"))
    if args.from_history:
        found = estimate(args)
        history = found.sentence()
        if found.gpu_mtbf_hours is not None:
            faults = FaultModel(gpu_mtbf_hours=found.gpu_mtbf_hours)
    goal = DEFAULT_GOAL_PERCENT
    if args.goodput_goal:
        goal = _positive_number(args.goodput_goal, "--goodput-goal")
        if goal > 100:
            raise GoodputUsageError(
                f"--goodput-goal must be a percentage from 0 to 100, got '{args.goodput_goal}'."
            )
    return GoodputInputs(faults, asynchronous, goal, history)


def _positive_number(text: str, flag: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise GoodputUsageError(f"{flag} must be a positive number, got '{text}'.")
    return value


def forecasts(plans: list[Plan], goodput: GoodputInputs) -> list[Forecast | None]:
    return [forecast(item, goodput.faults, goodput.asynchronous) for item in plans]


def lines(setup: Setup, plans: list[Plan], goodput: GoodputInputs, write_rate: float) -> list[str]:
    """The text section: one forecast per preference, the scale table, the levers below the goal."""
    faults = goodput.faults
    out = ["", f"Goodput (fault model: per-GPU MTBF {faults.gpu_mtbf:,.0f} h, {faults.source}):"]
    if goodput.history:
        out.append(f"  {goodput.history}")
    for item, result in zip(plans, forecasts(plans, goodput), strict=True):
        name = f"{item.spec.name} x{item.instance_count}"
        if result is None:
            out.append(
                f"  {name}: no forecast (no step time: no throughput on record for {item.spec.gpu_model})"
            )
            continue
        out.append(f"  {name}: {result.line()}")
        out.extend(_below_goal(result, goodput))
    if plans:
        item = plans[0]
        out.append(f"  {setup.model} on {item.spec.name} at {', '.join(f'{n:,}' for n in SCALES)} GPUs:")
        for scaled in at_scales(setup, item, faults, goodput.asynchronous, write_rate):
            out.append(f"    {scaled.gpus:>6,} GPUs: {scaled.line()}")
            out.extend("  " + text for text in _below_goal(scaled, goodput))
    return out


def _below_goal(result: Forecast, goodput: GoodputInputs) -> list[str]:
    if result.goodput.percent >= goodput.goal:
        return []
    ranked = levers(result, goodput.faults)
    best, best_percent = ranked[0]
    others = "; ".join(f"{name} {percent:.1f}%" for name, percent in ranked[1:])
    return [f"    below the {goodput.goal:g}% goal: {best} helps most ({best_percent:.1f}%); then {others}"]


def as_dict(setup: Setup, plans: list[Plan], goodput: GoodputInputs, write_rate: float) -> dict:
    first = plans[0] if plans else None
    return {
        "gpu_mtbf_hours": round(goodput.faults.gpu_mtbf, 1),
        "source": goodput.history or goodput.faults.source,
        "goal_percent": goodput.goal,
        "preferences": [result and result.as_dict() for result in forecasts(plans, goodput)],
        "scales": [
            {**scaled.as_dict(), "levers": levers(scaled, goodput.faults)}
            for scaled in (
                at_scales(setup, first, goodput.faults, goodput.asynchronous, write_rate) if first else []
            )
        ],
    }
