"""Goodput forecasts of a plan: the job's MTBF, the checkpoint interval that maximizes expected goodput, the
goodput and its parts, at any scale; the lever that helps most below a goal; and `checkpoint_interval: auto`
resolved for a profile (docs/plan.md, "Goodput").

Inputs per plan (trainstack.planning.plans): the step time (planner's tokens/s), the checkpoint's size and
each node's share (planning/checkpoints.py), the GPU count and the fault model (trainstack.fault_model).
The blocking part of a save: a synchronous save writes the node's share at the write rate; an async one
(train.py's --async-checkpoint) blocks only while each GPU's share is staged to host memory, and the next
save waits for the previous write, so the interval is at least the write time. The billed restart cost:
the image pull, the checkpoint download (SageMaker downloads the whole prefix, keep_checkpoints
checkpoints, to every node), and the warm-up steps. Provisioning is not billed (the ledger's rule).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

from training_scripts.metrics import WARMUP_STEPS
from trainstack.fault_model import FaultModel
from trainstack.planning.checkpoints import GB
from trainstack.planning.goodput_model import Goodput, best_interval, interval_goodput
from trainstack.planning.plans import Plan, Setup, plan

# Assumed until measured (the ledger's restart times refine them per run: docs/plan.md):
# - an image pull of the SMP-based training image on a restart;
ASSUMED_IMAGE_PULL_SECONDS = 180.0
# - one node's checkpoint download from S3 (SageMaker's checkpoint sync), and a read from FSx for Lustre;
ASSUMED_DOWNLOAD_BYTES_PER_SECOND = 1 * GB
# - an async save's staging copy, device to host, per GPU (PCIe; DCP's async_save stages before it returns);
ASSUMED_STAGING_BYTES_PER_SECOND = 5 * GB
# - what every save costs beyond moving bytes (DCP's save planning, its collectives, the commit);
ASSUMED_SAVE_OVERHEAD_SECONDS = 1.0
# - the unbilled wait for instances before a restart (not in goodput, shown in wall time).
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
    download: float
    warmup: float
    asynchronous: bool

    @property
    def restart(self) -> float:
        return self.image_pull + self.download + self.warmup

    @property
    def min_steps(self) -> int:
        """An async save waits for the previous one: saves no closer than one write."""
        return max(1, math.ceil(self.save_write / self.step)) if self.asynchronous else 1


@dataclass(frozen=True)
class Forecast:
    plan: Plan
    gpus: int
    mtbf_seconds: float
    costs: Costs
    goodput: Goodput  # at the chosen interval

    def line(self) -> str:
        parts = ", ".join(f"{name} {value:.2f}" for name, value in self.goodput.parts_percent().items())
        return (
            f"goodput {self.goodput.percent:.1f}% (lost: {parts} %); "
            f"job MTBF {self.mtbf_seconds / 3600:,.1f} h on {self.gpus:,} GPUs; "
            f"checkpoint every {self.goodput.interval_steps:,} steps "
            f"({_duration(self.goodput.interval_seconds)}), each blocking {self.costs.save_blocking:,.1f} s "
            f"({'async' if self.costs.asynchronous else 'sync'}); restart {self.costs.restart:,.0f} s billed "
            f"(image {self.costs.image_pull:,.0f}, checkpoint download {self.costs.download:,.0f}, "
            f"warm-up {self.costs.warmup:,.0f})"
        )

    def as_dict(self) -> dict:
        return {
            "gpus": self.gpus,
            "job_mtbf_hours": round(self.mtbf_seconds / 3600, 3),
            "checkpoint_interval_steps": self.goodput.interval_steps,
            "checkpoint_interval_seconds": round(self.goodput.interval_seconds, 1),
            "goodput_percent": round(self.goodput.percent, 3),
            "lost_percent": {name: round(value, 3) for name, value in self.goodput.parts_percent().items()},
            "save_blocking_seconds": round(self.costs.save_blocking, 3),
            "async_checkpoint": self.costs.asynchronous,
            "restart_seconds": round(self.costs.restart, 1),
        }


def costs_of(item: Plan, asynchronous: bool) -> Costs | None:
    """The plan's save and restart costs; None without a step time (no throughput for the GPU)."""
    step = item.checkpoint.step_seconds
    if step is None:
        return None
    world = item.instance_count * item.spec.gpus
    staging = item.checkpoint.size / world / ASSUMED_STAGING_BYTES_PER_SECOND + ASSUMED_SAVE_OVERHEAD_SECONDS
    write = item.checkpoint.save_seconds + ASSUMED_SAVE_OVERHEAD_SECONDS
    return Costs(
        step=step,
        save_blocking=staging if asynchronous else write,
        save_write=write,
        image_pull=ASSUMED_IMAGE_PULL_SECONDS,
        download=item.checkpoint.restart_download_per_node / ASSUMED_DOWNLOAD_BYTES_PER_SECOND,
        warmup=WARMUP_STEPS * step,
        asynchronous=asynchronous,
    )


def forecast_with(item: Plan, costs: Costs, faults: FaultModel) -> Forecast:
    gpus = item.instance_count * item.spec.gpus
    mtbf = faults.job_mtbf_seconds(gpus)
    chosen = best_interval(costs.step, costs.save_blocking, costs.restart, mtbf, costs.min_steps)
    return Forecast(item, gpus, mtbf, costs, chosen)


def forecast(item: Plan, faults: FaultModel, asynchronous: bool) -> Forecast | None:
    costs = costs_of(item, asynchronous)
    return forecast_with(item, costs, faults) if costs else None


def at_interval(result: Forecast, steps: int) -> Goodput:
    """The same job's expected goodput with a fixed interval of `steps`."""
    costs = result.costs
    return interval_goodput(steps, costs.step, costs.save_blocking, costs.restart, result.mtbf_seconds)


def levers(result: Forecast, faults: FaultModel) -> list[tuple[str, float]]:
    """(lever, goodput % with it), best first: faster restarts and a smaller blocking save."""
    item, costs = result.plan, result.costs
    fsx = "checkpoints on FSx for Lustre (a restart reads one checkpoint, not keep_checkpoints from S3)"
    options = {
        fsx: replace(costs, download=item.checkpoint.per_node / ASSUMED_DOWNLOAD_BYTES_PER_SECOND),
        "warm pools (keep_alive_seconds: no image pull on a restart)": replace(costs, image_pull=0.0),
    }
    if not costs.asynchronous:
        options["async saves (hyperparameter async_checkpoint true)"] = costs_of(item, asynchronous=True)
    else:
        options["a smaller blocking save (half the staging time)"] = replace(
            costs, save_blocking=costs.save_blocking / 2
        )
    gains = [
        (name, forecast_with(item, changed, faults).goodput.percent) for name, changed in options.items()
    ]
    return sorted(gains, key=lambda pair: -pair[1])


def at_scales(
    setup: Setup, item: Plan, faults: FaultModel, asynchronous: bool, write_rate: float
) -> Iterator[Forecast]:
    """The forecast of the same model on the same instance type at SCALES GPUs."""
    for gpus in SCALES:
        count = max(1, gpus // item.spec.gpus)
        scaled = forecast(plan(setup, item.spec, count, None, write_rate), faults, asynchronous)
        if scaled:
            yield scaled


def asynchronous_saves(hyperparameters: Mapping[str, str]) -> bool:
    return str(hyperparameters.get("async_checkpoint", "false")).lower() in _TRUE


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"
