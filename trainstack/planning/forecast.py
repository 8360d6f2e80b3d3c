"""Goodput forecasts of a plan: the job's MTBF, the checkpoint interval that maximizes expected goodput, the
goodput and its parts, billed and wall-clock, at any scale and in each checkpoint store; the lever that helps
most below a goal; and `checkpoint_interval: auto` resolved for a profile (docs/plan.md, "Goodput").

Inputs per plan (trainstack.planning.plans): the step time (planner's tokens/s), the checkpoint's size
(planning/checkpoints.py), the store's write, durability and restore times (planning/stores.py), the GPU
count and the fault model (trainstack.fault_model). The blocking part of a save: a synchronous save writes
the node's share to the store; an async one (train.py's --async-checkpoint) blocks only while each GPU's
share is staged to host memory, and the next save waits for the previous write, so the interval is at least
the write time; either counts once it is durable. A restart after a failure: a new job waits for
provisioning (unbilled: wall-clock only), pulls the image, restores the checkpoint and warms up; with in-job
recovery, the failures that leave the instances healthy (fault_model.HEALTHY_INSTANCE_SHARE) restart the
workers in the same job: restore and warm-up only. Restarts can fail too (goodput_model.restart_chain).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from training_scripts.metrics import WARMUP_STEPS
from trainstack.checkpoint_stores import CHECKPOINT_STORES, DEFAULT_CHECKPOINT_STORE
from trainstack.fault_model import HEALTHY_INSTANCE_SHARE, FaultModel
from trainstack.in_job_restarts import TORCHRUN_STRATEGIES, InJobRestartPolicy
from trainstack.planning.checkpoints import GB
from trainstack.planning.goodput_model import (
    Goodput,
    Restarts,
    best_interval,
    interval_goodput,
    restart_chain,
)
from trainstack.planning.interruptions import Exposure, StopCost, exposure
from trainstack.planning.plans import Plan, Setup, plan
from trainstack.planning.stores import Checkpointing, store_times

if TYPE_CHECKING:
    from trainstack.profiles import Profile

# Assumed until measured (the ledger's restart times refine them per run: docs/plan.md):
# - an image pull of the SMP-based training image when a new job starts;
ASSUMED_IMAGE_PULL_SECONDS = 180.0
# - an async save's staging copy, device to host, per GPU (PCIe; DCP's async_save stages before it returns);
ASSUMED_STAGING_BYTES_PER_SECOND = 5 * GB
# - what every save costs beyond moving bytes (DCP's save planning, its collectives, the commit);
ASSUMED_SAVE_OVERHEAD_SECONDS = 1.0
# - the unbilled wait for a new job's instances (not in billed goodput, in wall-clock goodput).
ASSUMED_PROVISIONING_SECONDS = 600.0
DEFAULT_GOAL_PERCENT = 90.0
SCALES = (16, 256, 1_024, 16_384)
AUTO = "auto"
INTERVAL_HYPERPARAMETER = "checkpoint_interval"
_TRUE = ("true", "1", "yes")


@dataclass(frozen=True)
class Costs:
    """What failures and saves cost one job, in seconds."""

    step: float
    save_blocking: float
    save_write: float  # the whole write of a node's share (an async save's background part)
    image_pull: float
    download: float  # a new job's restore of the checkpoint
    warmup: float
    asynchronous: bool
    store: str = DEFAULT_CHECKPOINT_STORE
    durable_after: float = 0.0  # after the blocking part, until the save survives a lost instance
    provisioning: float = ASSUMED_PROVISIONING_SECONDS
    in_job_restore: float | None = None  # an in-job restart's restore; None: every failure starts a new job
    healthy_share: float = HEALTHY_INSTANCE_SHARE

    @property
    def restart(self) -> float:
        """A new job's billed restart."""
        return self.image_pull + self.download + self.warmup

    @property
    def min_steps(self) -> int:
        """An async save waits for the previous one: saves no closer than one write."""
        return max(1, math.ceil(self.save_write / self.step)) if self.asynchronous else 1

    def restarts(self) -> Restarts:
        in_job = None if self.in_job_restore is None else self.in_job_restore + self.warmup
        return Restarts(
            before_training=self.image_pull + self.download,
            warmup=self.warmup,
            provisioning=self.provisioning,
            in_job=in_job,
            hardware_share=1 - self.healthy_share,
        )


@dataclass(frozen=True)
class Forecast:
    plan: Plan
    gpus: int
    mtbf_seconds: float
    costs: Costs
    goodput: Goodput  # billed, at the chosen interval
    wall_clock: Goodput  # the same interval, provisioning counted
    restart_seconds: float  # expected billed seconds per attempt until training runs again
    exposure: Exposure  # what interrupts the job
    bounded: bool  # fault_model.max_hours_without_checkpoint, not the optimum, set the interval
    stop: StopCost  # what a stop costs where its SIGTERM save does not fit

    def line(self) -> str:
        parts = ", ".join(f"{name} {value:.2f}" for name, value in self.wall_clock.parts_percent().items())
        costs = self.costs
        in_job = ""
        if costs.in_job_restore is not None:
            seconds = costs.in_job_restore + costs.warmup
            in_job = f"; in-job restarts ({costs.healthy_share:.0%} of failures) {seconds:,.0f} s"
        return (
            f"goodput {self.goodput.percent:.1f}% billed, {self.wall_clock.percent:.1f}% wall-clock "
            f"(wall-clock lost: {parts} %); store {costs.store}; "
            f"job MTBF {1 / self.exposure.failure_rate / 3600:,.1f} h on {self.gpus:,} GPUs, "
            f"{self.mtbf_seconds / 3600:,.1f} h between events that lose work; "
            f"checkpoint every {self.goodput.interval_steps:,} steps "
            f"({duration(self.goodput.interval_seconds)}{self._bound_note()}), "
            f"each blocking {costs.save_blocking:,.1f} s "
            f"({'async' if costs.asynchronous else 'sync'}), durable {costs.durable_after:,.0f} s later; "
            f"a new job {costs.restart:,.0f} s billed (image {costs.image_pull:,.0f}, restore "
            f"{costs.download:,.0f}, warm-up {costs.warmup:,.0f}) after {costs.provisioning:,.0f} s of "
            f"provisioning{in_job}{self._no_way_back()}"
        )

    @property
    def most_steps(self) -> int:
        """The most steps between saves that fault_model.max_hours_without_checkpoint allows here."""
        room = (
            self.exposure.max_seconds_without_checkpoint - self.costs.save_blocking - self.costs.durable_after
        )
        return (
            max(1, math.floor(room / self.costs.step)) if math.isfinite(room) else self.goodput.interval_steps
        )

    def _no_way_back(self) -> str:
        if math.isfinite(self.restart_seconds):
            return ""
        return "; a new job never comes back: failures strike its start long before it ends"

    def _bound_note(self) -> str:
        if not self.bounded:
            return ""
        hours = self.exposure.max_seconds_without_checkpoint / 3600
        return f", bounded by fault_model.max_hours_without_checkpoint {hours:g} h"

    def stop_line(self) -> str | None:
        """What a stop costs, where a SIGTERM save does not fit (None where it does)."""
        if self.plan.checkpoint.sigterm_save_fits:
            return None
        return f"SIGTERM save does not fit: {self.stop.sentence()}"

    def as_dict(self) -> dict:
        costs = self.costs
        return {
            "gpus": self.gpus,
            "job_mtbf_hours": round(1 / self.exposure.failure_rate / 3600, 3),
            "hours_between_lossy_events": round(self.mtbf_seconds / 3600, 3),
            "interruptions_per_hour": {
                name: round(rate * 3600, 6) for name, rate in self.exposure.interruptions.items()
            },
            "interruptions_losing_work": list(self.exposure.lossy),
            "max_hours_without_checkpoint": self.exposure.max_seconds_without_checkpoint / 3600,
            "checkpoint_interval_bounded": self.bounded,
            "stop_cost": None if self.plan.checkpoint.sigterm_save_fits else self.stop.as_dict(),
            "checkpoint_store": costs.store,
            "in_job_recovery": costs.in_job_restore is not None,
            "checkpoint_interval_steps": self.goodput.interval_steps,
            "checkpoint_interval_seconds": round(self.goodput.interval_seconds, 1),
            "goodput_percent": round(self.goodput.percent, 3),
            "wall_clock_goodput_percent": round(self.wall_clock.percent, 3),
            "lost_percent": _rounded(self.goodput.parts_percent()),
            "wall_clock_lost_percent": _rounded(self.wall_clock.parts_percent()),
            "save_blocking_seconds": round(costs.save_blocking, 3),
            "save_durable_after_seconds": round(costs.durable_after, 3),
            "async_checkpoint": costs.asynchronous,
            "restart_seconds": round(costs.restart, 1),
            "restore_seconds": round(costs.download, 1),
            "provisioning_seconds": costs.provisioning,
            "expected_restart_seconds": round(self.restart_seconds, 1),
        }


def costs_of(
    item: Plan, asynchronous: bool, store: str = DEFAULT_CHECKPOINT_STORE, in_job: bool = False
) -> Costs | None:
    """The plan's save and restart costs in `store`; None without a step time (no throughput for the GPU)."""
    step = item.checkpoint.step_seconds
    if step is None:
        return None
    world = item.instance_count * item.spec.gpus
    job = Checkpointing(
        size=item.checkpoint.size,
        nodes=item.instance_count,
        ranks=world,
        keep=item.setup.keep_checkpoints,
        disk_bytes_per_second=item.checkpoint.write_rate,
        asynchronous=asynchronous,
    )
    times = store_times(store, job)
    staging = item.checkpoint.size / world / ASSUMED_STAGING_BYTES_PER_SECOND + ASSUMED_SAVE_OVERHEAD_SECONDS
    write = times.write + ASSUMED_SAVE_OVERHEAD_SECONDS
    return Costs(
        step=step,
        save_blocking=staging if asynchronous else write,
        save_write=write,
        image_pull=ASSUMED_IMAGE_PULL_SECONDS,
        download=times.restore_new_job,
        warmup=WARMUP_STEPS * step,
        asynchronous=asynchronous,
        store=store,
        durable_after=times.durable_after,
        in_job_restore=times.restore_in_job if in_job else None,
    )


def forecast_with(item: Plan, costs: Costs, faults: FaultModel) -> Forecast:
    gpus = item.instance_count * item.spec.gpus
    exposed = exposure(faults, gpus, item.checkpoint.sigterm_save_fits)
    failure_mtbf = 1 / exposed.failure_rate
    mtbf = 1 / exposed.lossy_rate  # between the events that lose work: an attempt
    restarts = costs.restarts()
    # A SIGTERM save that keeps the work costs the step in progress and the save's write.
    billed, unbilled = exposed.restart_per_attempt(restarts, costs.step + costs.save_write)
    new_job_billed = restart_chain(restarts, failure_mtbf, new_job=True)[0]
    # The optimum depends on neither the restart nor the durability delay (goodput_model): one interval,
    # then bounded so that no stretch without a durable checkpoint outlasts the profile's bound.
    chosen = best_interval(
        costs.step, costs.save_blocking, billed, mtbf, costs.min_steps, costs.durable_after
    )
    room = exposed.max_seconds_without_checkpoint - costs.save_blocking - costs.durable_after
    bounded = room < chosen.interval_steps * costs.step
    if bounded:
        steps = max(1, math.floor(room / costs.step))
        chosen = interval_goodput(steps, costs.step, costs.save_blocking, billed, mtbf, costs.durable_after)
    wall = interval_goodput(
        chosen.interval_steps, costs.step, costs.save_blocking, billed, mtbf, costs.durable_after, unbilled
    )
    throughput = item.throughput
    stop = StopCost(
        lost_seconds=(chosen.interval_seconds + costs.save_blocking) / 2 + costs.durable_after,
        most_lost_seconds=chosen.interval_seconds + costs.save_blocking + costs.durable_after,
        restart_seconds=new_job_billed,
        usd_per_hour=throughput and throughput.usd_per_hour,
    )
    return Forecast(item, gpus, mtbf, costs, chosen, wall, billed, exposed, bounded, stop)


def forecast(
    item: Plan,
    faults: FaultModel,
    asynchronous: bool,
    store: str = DEFAULT_CHECKPOINT_STORE,
    in_job: bool = False,
) -> Forecast | None:
    costs = costs_of(item, asynchronous, store, in_job)
    return forecast_with(item, costs, faults) if costs else None


def best_store(item: Plan, faults: FaultModel, asynchronous: bool, in_job: bool = False) -> Forecast | None:
    """The store with the highest wall-clock goodput; within 0.01 points the earlier in CHECKPOINT_STORES
    (the simpler: today's default first)."""
    results = [forecast(item, faults, asynchronous, store, in_job) for store in CHECKPOINT_STORES]
    if results[0] is None:
        return None
    ranked = max(enumerate(results), key=lambda pair: (round(pair[1].wall_clock.percent, 2), -pair[0]))
    return ranked[1]


def store_sentence(best: Forecast, other: Forecast) -> str:
    """Why `best`'s store beats `other`'s, in one sentence."""
    store = best.costs.store
    if store == other.costs.store:
        return f"checkpoint_store {store} gives the most goodput here ({_figures(best)})."
    return (
        f"checkpoint_store {store} gives the most goodput here ({_figures(best)}): a new job "
        f"restores in {best.costs.download:,.0f} s and a save is durable {best.costs.durable_after:,.0f} s "
        f"after it blocks, against {other.costs.download:,.0f} s and {other.costs.durable_after:,.0f} s "
        f"with {other.costs.store} ({_figures(other)})."
    )


def at_interval(result: Forecast, steps: int) -> Goodput:
    """The same job's expected goodput with a fixed interval of `steps`."""
    costs = result.costs
    return interval_goodput(
        steps,
        costs.step,
        costs.save_blocking,
        result.restart_seconds,
        result.mtbf_seconds,
        costs.durable_after,
    )


def levers(result: Forecast, faults: FaultModel) -> list[tuple[str, float]]:
    """(lever, wall-clock goodput % with it), best first: a faster store, in-job recovery, no image pull,
    and a smaller blocking save."""
    item, costs = result.plan, result.costs
    options: dict[str, Costs] = {}
    fastest = best_store(item, faults, costs.asynchronous, costs.in_job_restore is not None)
    if fastest.costs.store != costs.store:
        options[f"checkpoint_store {fastest.costs.store}"] = fastest.costs
    if costs.in_job_restore is None:
        options["in-job recovery (failures that leave the instances healthy restart in the job)"] = costs_of(
            item, costs.asynchronous, costs.store, in_job=True
        )
    options["warm pools (keep_alive_seconds: no image pull on a restart; assumed)"] = replace(
        costs, image_pull=0.0
    )
    if not costs.asynchronous:
        options["async saves (hyperparameter async_checkpoint true)"] = costs_of(
            item, True, costs.store, costs.in_job_restore is not None
        )
    else:
        options["a smaller blocking save (half the staging time)"] = replace(
            costs, save_blocking=costs.save_blocking / 2
        )
    gains = [
        (name, forecast_with(item, changed, faults).wall_clock.percent) for name, changed in options.items()
    ]
    return sorted(gains, key=lambda pair: -pair[1])


def at_scales(
    setup: Setup,
    item: Plan,
    faults: FaultModel,
    asynchronous: bool,
    write_rate: float,
    store: str = DEFAULT_CHECKPOINT_STORE,
    in_job: bool = False,
) -> Iterator[Forecast]:
    """The forecast of the same model on the same instance type at those of SCALES GPUs where it fits."""
    for gpus in SCALES:
        count = max(1, gpus // item.spec.gpus)
        scaled_plan = plan(setup, item.spec, count, None, write_rate)
        scaled = forecast(scaled_plan, faults, asynchronous, store, in_job) if scaled_plan.fits else None
        if scaled:
            yield scaled


def run_faults(profile: Profile) -> FaultModel:
    """The profile's fault model as its runs meet it: spot reclaims on spot, a plan's end inside a plan."""
    return profile.fault_model.for_run(profile.managed_spot, any(profile.training_plan_arns))


def profile_store(profile: object) -> str:
    """The profile's checkpoint store. The field comes with the stores themselves (issue 41, h-stores);
    until a profile has it, every profile syncs."""
    return getattr(profile, "checkpoint_store", DEFAULT_CHECKPOINT_STORE)


def profile_in_job_recovery(profile: Profile) -> bool:
    """Whether the profile's jobs restart their workers in the job (trainstack/in_job_restarts.py): torchrun
    launches them and their restart budget is above 0."""
    policy = profile.in_job_restarts or InJobRestartPolicy()
    return profile.strategy in TORCHRUN_STRATEGIES and policy.max_restarts > 0


def asynchronous_saves(hyperparameters: Mapping[str, str]) -> bool:
    return str(hyperparameters.get("async_checkpoint", "false")).lower() in _TRUE


def _figures(result: Forecast) -> str:
    return f"{result.wall_clock.percent:.1f}% wall-clock, {result.goodput.percent:.1f}% billed"


def _rounded(parts: Mapping[str, float]) -> dict[str, float]:
    return {name: round(value, 3) for name, value in parts.items()}


def duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"
