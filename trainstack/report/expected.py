"""The forecast goodput of a run beside the ledger's measured one (`trainstack report` and `status`).

The forecast is planning/forecast.py's for the run's profile (with the execution's hyperparameters) on the
instance type and count its newest job ran on, at the checkpoint interval that job was given (its
HyperParameters, as DescribeTrainingJob returns them). Where the job reported its last checkpoint pause and
tokens/s (FinalMetricDataList), those replace the planner's save and step times.

The figure is for this run: its max_steps of training, its first start (image pull, restore, warm-up: billed,
kept by no step), and the rest at the long-run share (saves, lost work and restarts as the model spreads them
over many interruptions): goodput = W / (S + W / g), W the training, S the first start, g the long-run
goodput. The long-run figure itself is shown only for a run at least as long as the time between the events
that lose work; a shorter run (a 60-step demo) would see none of them, and its goodput is its first start's.
The measured figure names the ledger's counterparts of W and S (training kept, the first job's start), so
that a gap between the two says where it comes from (a slower start than planned, a slower step).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from training_scripts.metrics import CHECKPOINT_PAUSE_METRIC as PAUSE_METRIC
from training_scripts.metrics import TOKENS_PER_SECOND_METRIC as SPEED_METRIC
from training_scripts.metrics import WARMUP_STEPS
from trainstack.cost_cap import run_steps
from trainstack.instances import INSTANCE_TYPES
from trainstack.planning.forecast import (
    INTERVAL_HYPERPARAMETER,
    asynchronous_saves,
    at_interval,
    duration,
    forecast,
    forecast_with,
    run_faults,
)
from trainstack.planning.plans import plan
from trainstack.planning.setups import UnplannableError, setup_for_profile
from trainstack.report.collect import RunReport
from trainstack.report.goodput import KEPT, STARTING, RunLedger
from trainstack.runs import run_input


def forecast_line(report: RunReport, ledger: RunLedger, settings: Any) -> str:
    measured = ledger.goodput_percent
    measured_text = (
        "no billed time yet" if measured is None else f"{measured:.1f}% ({_measured_parts(ledger)})"
    )
    return f"forecast goodput: {_forecast(report, settings)}; measured (ledger): {measured_text}"


def _measured_parts(ledger: RunLedger) -> str:
    """The ledger's counterparts of the forecast's two figures, per instance: the run's training kept and the
    start of its first job that billed: what a gap between forecast and measured goodput comes from."""
    kept = sum(row.parts_ms[KEPT] for row in ledger.attempts) / 1000
    first_start = next(row for row in ledger.attempts if row.billed_ms).parts_ms[STARTING] / 1000
    return f"{duration(kept)} of training kept after a first start of {first_start:,.0f} s"


def _forecast(report: RunReport, settings: Any) -> str:
    given = run_input(report.execution)
    names = [profile.name for profile in settings.profiles]
    name = given.get("profile", names[0])
    if name not in names:
        return f"none (profile {name} is not in this config)"
    profile = settings.profile(name)
    hyperparameters = {**profile.hyperparameters, **given.get("hyperparameters", {})}
    ran = [attempt for attempt in report.attempts if attempt.instance_type in INSTANCE_TYPES]
    if not ran:
        return "none yet (no job has started)"
    job = ran[-1]
    try:
        setup = setup_for_profile(profile.model_copy(update={"hyperparameters": hyperparameters}))
    except UnplannableError as error:
        return f"none ({error})"
    item = plan(setup, INSTANCE_TYPES[job.instance_type], job.instance_count, None)
    faults = run_faults(profile)
    result = forecast(item, faults, asynchronous_saves(hyperparameters))
    if result is None:
        return f"none (no throughput on record for {item.spec.gpu_model})"
    final = _final_metrics(job.job)
    figures = "planned step and save times"
    if final.get(PAUSE_METRIC, 0) > 0 and final.get(SPEED_METRIC, 0) > 0:
        step = setup.tokens_per_step(item.spec, item.instance_count) / final[SPEED_METRIC]
        costs = replace(
            result.costs, step=step, save_blocking=final[PAUSE_METRIC], warmup=WARMUP_STEPS * step
        )
        result = forecast_with(item, costs, faults)
        figures = f"the job's measured step time {step:,.3g} s and save pause {final[PAUSE_METRIC]:,.3g} s"
    given_interval = str(job.job.get("HyperParameters", {}).get(INTERVAL_HYPERPARAMETER, "")).strip('"')
    steps = int(given_interval) if given_interval.isdigit() else result.goodput.interval_steps
    expected = at_interval(result, steps)
    total_steps = run_steps(profile, given.get("hyperparameters", {}))
    work = total_steps * result.costs.step
    start = result.costs.restart
    this_run = 100 * work / (start + work / expected.kept) if expected.kept else 0.0
    text = (
        f"{this_run:.1f}% for this run's {total_steps:,} steps on {job.instance_count} x {job.instance_type} "
        f"({duration(work)} of training after a first start of {start:,.0f} s; checkpoint every "
        f"{steps:,} steps, {figures})"
    )
    between = result.mtbf_seconds
    if work < between:
        return (
            f"{text}; no long-run figure: the run trains for less than the {duration(between)} between "
            "events that lose work"
        )
    return (
        f"{text}; in the long run {expected.percent:.1f}% (job MTBF "
        f"{1 / result.exposure.failure_rate / 3600:,.1f} h, {between / 3600:,.1f} h between events that lose "
        f"work; best {result.goodput.interval_steps:,} steps: {result.goodput.percent:.1f}%)"
    )


def interval_lines(report: RunReport) -> list[str]:
    """How each attempt's checkpoint interval came about: the number its job got and what the job measured
    (DescribeTrainingJob's FinalMetricDataList), from which the pipeline re-solves `auto` for the next
    attempt (stacks/pipeline/checkpoint_interval.py)."""
    lines = []
    for attempt in report.attempts:
        hyperparameters = attempt.job.get("HyperParameters", {})
        if INTERVAL_HYPERPARAMETER not in hyperparameters:
            continue
        final = _final_metrics(attempt.job)
        text = f"attempt {attempt.number}: checkpoint every {hyperparameters[INTERVAL_HYPERPARAMETER]} steps"
        if PAUSE_METRIC in final and SPEED_METRIC in final:
            text += (
                f"; measured: last save paused {final[PAUSE_METRIC]:,.1f} s, "
                f"{final[SPEED_METRIC]:,.0f} tokens/s "
                "(the next attempt's interval of an auto profile is solved from these)"
            )
        lines.append(text)
    return lines


def _final_metrics(job: dict[str, Any]) -> dict[str, float]:
    return {item["MetricName"]: item["Value"] for item in job.get("FinalMetricDataList", [])}
