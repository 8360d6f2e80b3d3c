"""`trainstack plan`'s goodput forecast: per instance preference the job's MTBF, the checkpoint interval that
maximizes expected goodput, the goodput billed and wall-clock and its parts, and the checkpoint store that
maximizes it (and why); the same model at 16 to 16,384 GPUs, beside the best store with in-job recovery;
below the goal, the lever that helps most (docs/plan.md, "Goodput")."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

from trainstack.checkpoint_stores import CHECKPOINT_STORES, DEFAULT_CHECKPOINT_STORE
from trainstack.fault_model import FaultModel
from trainstack.planning.auto_interval import auto_interval, is_auto
from trainstack.planning.forecast import (
    DEFAULT_GOAL_PERCENT,
    SCALES,
    Forecast,
    asynchronous_saves,
    at_scales,
    best_store,
    forecast,
    levers,
    profile_in_job_recovery,
    profile_store,
    run_faults,
    store_sentence,
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
    store: str = DEFAULT_CHECKPOINT_STORE
    in_job: bool = False  # in-job recovery of the failures that leave the instances healthy


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
    add(
        "--checkpoint-store",
        metavar="NAME",
        help=f"{', '.join(CHECKPOINT_STORES)} (default: the profile's checkpoint_store, else "
        f"{DEFAULT_CHECKPOINT_STORE})",
    )
    add(
        "--in-job-recovery",
        metavar="BOOL",
        help="forecast with in-job recovery, true or false (default: whether the profile's jobs restart "
        "in the job: torchrun and smp profiles with in_job_restarts.max_restarts above 0)",
    )
    add(
        "--goodput-goal",
        metavar="PERCENT",
        help=f"wall-clock goodput to aim for (default {DEFAULT_GOAL_PERCENT:g})",
    )


def inputs(args: argparse.Namespace, profile, estimate) -> GoodputInputs:
    """The fault model, async flag and goal from the flags and the profile; `estimate(args)` reads history."""
    faults = run_faults(profile) if profile else FaultModel()
    asynchronous = asynchronous_saves(profile.hyperparameters) if profile else False
    if args.async_checkpoint:
        if args.async_checkpoint.lower() not in ("true", "false"):
            raise GoodputUsageError("--async-checkpoint must be true or false.")
        asynchronous = args.async_checkpoint.lower() == "true"
    history = None
    if args.gpu_mtbf_hours and args.from_history:
        raise GoodputUsageError("--gpu-mtbf-hours and --from-history exclude each other: give one.")
    if args.gpu_mtbf_hours:
        hours = _positive_number(args.gpu_mtbf_hours, "--gpu-mtbf-hours")
        faults = faults.model_copy(update={"gpu_mtbf_hours": hours})
    if args.from_history:
        found = estimate(args)
        history = found.sentence()
        if found.gpu_mtbf_hours is not None:
            faults = faults.model_copy(update={"gpu_mtbf_hours": found.gpu_mtbf_hours})
    store = profile_store(profile) if profile else DEFAULT_CHECKPOINT_STORE
    if args.checkpoint_store:
        if args.checkpoint_store not in CHECKPOINT_STORES:
            raise GoodputUsageError(f"--checkpoint-store must be one of {', '.join(CHECKPOINT_STORES)}.")
        store = args.checkpoint_store
    in_job = profile_in_job_recovery(profile) if profile else False
    return GoodputInputs(faults, asynchronous, _goal(args), history, store, _in_job(args, in_job))


def _in_job(args: argparse.Namespace, profile_default: bool) -> bool:
    if not args.in_job_recovery:
        return profile_default
    if args.in_job_recovery.lower() not in ("true", "false"):
        raise GoodputUsageError("--in-job-recovery must be true or false.")
    return args.in_job_recovery.lower() == "true"


def _goal(args: argparse.Namespace) -> float:
    goal = DEFAULT_GOAL_PERCENT
    if args.goodput_goal:
        goal = _positive_number(args.goodput_goal, "--goodput-goal")
        if goal > 100:
            raise GoodputUsageError(
                f"--goodput-goal must be a percentage from 0 to 100, got '{args.goodput_goal}'."
            )
    return goal


def _positive_number(text: str, flag: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise GoodputUsageError(f"{flag} must be a positive number, got '{text}'.")
    return value


def auto_lines(profile) -> list[str]:
    """What `checkpoint_interval: auto` resolves to: one number of steps for every preference."""
    if profile is None or not is_auto(profile):
        return []
    return [
        f"  checkpoint_interval: auto resolves to {auto_interval(profile):,} steps: the first preference's "
        "optimum, capped so that no preference trains longer than fault_model.max_hours_without_checkpoint "
        "without a durable checkpoint (the request names one interval whatever type SageMaker picks; the "
        "pipeline re-solves it after each attempt for the type the job got)"
    ]


def forecasts(plans: list[Plan], goodput: GoodputInputs) -> list[Forecast | None]:
    return [
        forecast(item, goodput.faults, goodput.asynchronous, goodput.store, goodput.in_job) for item in plans
    ]


def lines(setup: Setup, plans: list[Plan], goodput: GoodputInputs, write_rate: float) -> list[str]:
    """The text section: one forecast per preference and its best store, the scale table, the levers."""
    faults = goodput.faults
    out = ["", f"Goodput (fault model: per-GPU MTBF {faults.gpu_mtbf:,.0f} h, {faults.source}):"]
    results = forecasts(plans, goodput)
    first = next((result for result in results if result), None)
    if first:
        out.append(f"  {first.exposure.sentence()}")
    if goodput.history:
        out.append(f"  {goodput.history}")
    for item, result in zip(plans, results, strict=True):
        name = f"{item.spec.name} x{item.instance_count}"
        if result is None:
            out.append(
                f"  {name}: no forecast (no step time: no throughput on record for {item.spec.gpu_model})"
            )
            continue
        out.append(f"  {name}: {result.line()}")
        if stop := result.stop_line():
            out.append(f"    {stop}")
        out.append(f"    {_store_choice(result, goodput)}")
        out.extend(_below_goal(result, goodput))
    if plans:
        item = plans[0]
        out.append(f"  {setup.model} on {item.spec.name} at {', '.join(f'{n:,}' for n in SCALES)} GPUs:")
        scales = list(_scales(setup, item, goodput, write_rate))
        unfit = [f"{gpus:,}" for gpus in SCALES if gpus not in {scaled.gpus for scaled in scales}]
        if unfit:
            out.append(
                f"    not forecast at {', '.join(unfit)} GPUs: the model does not fit there (or no step time)"
            )
        for scaled in scales:
            out.append(f"    {scaled.gpus:>6,} GPUs: {scaled.line()}")
            best = _fastest(scaled, goodput)
            out.append(
                f"      with checkpoint_store {best.costs.store} and in-job recovery: "
                f"{best.wall_clock.percent:.1f}% wall-clock, {best.goodput.percent:.1f}% billed"
            )
            out.extend("  " + text for text in _below_goal(scaled, goodput))
    return out


def _scales(setup: Setup, item: Plan, goodput: GoodputInputs, write_rate: float):
    return at_scales(
        setup, item, goodput.faults, goodput.asynchronous, write_rate, goodput.store, goodput.in_job
    )


def _fastest(result: Forecast, goodput: GoodputInputs) -> Forecast:
    """The best store with in-job recovery: what the restart model allows at this scale."""
    return best_store(result.plan, goodput.faults, goodput.asynchronous, in_job=True)


def _store_choice(result: Forecast, goodput: GoodputInputs) -> str:
    best = best_store(result.plan, goodput.faults, goodput.asynchronous, goodput.in_job)
    return store_sentence(best, result)


def _below_goal(result: Forecast, goodput: GoodputInputs) -> list[str]:
    if result.wall_clock.percent >= goodput.goal:
        return []
    ranked = levers(result, goodput.faults)
    best, best_percent = ranked[0]
    others = "; ".join(f"{name} {percent:.1f}%" for name, percent in ranked[1:])
    return [
        f"    below the {goodput.goal:g}% wall-clock goal: {best} helps most ({best_percent:.1f}%); "
        f"then {others}"
    ]


def as_dict(setup: Setup, plans: list[Plan], goodput: GoodputInputs, write_rate: float) -> dict:
    first = plans[0] if plans else None
    return {
        "gpu_mtbf_hours": round(goodput.faults.gpu_mtbf, 1),
        "source": goodput.history or goodput.faults.source,
        "goal_percent": goodput.goal,
        "checkpoint_store": goodput.store,
        "in_job_recovery": goodput.in_job,
        "preferences": [
            result and {**result.as_dict(), "best_store": _best_dict(result, goodput)}
            for result in forecasts(plans, goodput)
        ],
        "scales": [
            {
                **scaled.as_dict(),
                "levers": levers(scaled, goodput.faults),
                "best_store_with_in_job_recovery": _fastest(scaled, goodput).as_dict(),
            }
            for scaled in (_scales(setup, first, goodput, write_rate) if first else [])
        ],
    }


def _best_dict(result: Forecast, goodput: GoodputInputs) -> dict:
    best = best_store(result.plan, goodput.faults, goodput.asynchronous, goodput.in_job)
    return {**best.as_dict(), "why": store_sentence(best, result)}
