"""What interrupts a job besides failures, and what an interruption costs (docs/plan.md, "Interruptions").

A job stops for failures (trainstack.fault_model: the per-GPU MTBF) and for interruptions that are not
failures (`fault_model.interruption_hours`: stops, queue preemption, spot reclaims, a training plan's end,
capacity losses, deploys), each at its own rate per hour of running. An interruption that comes with
SIGTERM keeps its work where the SIGTERM save fits (planning/checkpoints.py), else it loses the work since
the last durable checkpoint, as a failure does; either way a new job comes back (provisioning, image,
restore, warm-up). The interval that maximizes goodput is solved against everything that loses work, and
bounded by `fault_model.max_hours_without_checkpoint`. Simplification: only failures interrupt a restart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainstack.fault_model import WARNED_INTERRUPTIONS, FaultModel
from trainstack.planning.goodput_model import Restarts, restart_chain


@dataclass(frozen=True)
class Exposure:
    """A job's interruptions: rates per second of running, and which of them lose work."""

    failure_rate: float  # failures (the fault model's MTBF at the job's GPUs)
    interruptions: dict[str, float]  # counted interruptions by kind
    lossy: tuple[str, ...]  # the kinds that lose the work since the last durable checkpoint
    max_seconds_without_checkpoint: float

    @property
    def lossy_rate(self) -> float:
        """Everything that loses work: failures and the interruptions that keep nothing."""
        return self.failure_rate + sum(self.interruptions[name] for name in self.lossy)

    @property
    def kept_rate(self) -> float:
        """Interruptions whose SIGTERM save keeps the work: they cost a new job only."""
        return sum(rate for name, rate in self.interruptions.items() if name not in self.lossy)

    def restart_per_attempt(self, restarts: Restarts, kept_save: float) -> tuple[float, float]:
        """(billed, unbilled) restart seconds per attempt (from a resume to the next event that loses work):
        that event's restart (a failure's by the restart chain, an interruption's a new job), and the new jobs
        after the interruptions in between whose SIGTERM save (`kept_save` seconds) kept the work."""
        failure = restart_chain(restarts, 1 / self.failure_rate)
        new_job = restart_chain(restarts, 1 / self.failure_rate, new_job=True)
        interrupted = 1 - self.failure_rate / self.lossy_rate
        kept = self.kept_rate / self.lossy_rate  # such interruptions per attempt
        billed = (1 - interrupted) * failure[0] + interrupted * new_job[0] + kept * (new_job[0] + kept_save)
        unbilled = (1 - interrupted) * failure[1] + interrupted * new_job[1] + kept * new_job[1]
        return billed, unbilled

    def sentence(self) -> str:
        """The counted interruptions, named, with their assumed rates and whether they lose work."""
        if not self.interruptions:
            return "no interruptions besides failures counted"
        kinds = ", ".join(
            f"{name.replace('_', ' ')} every {1 / rate / 3600:,.0f} h"
            for name, rate in self.interruptions.items()
        )
        lossy = [name.replace("_", " ") for name in self.lossy]
        losing = (
            f"{', '.join(lossy)} lose the work since the last durable checkpoint"
            if lossy
            else "none loses work"
        )
        return f"interruptions per job (fault_model.interruption_hours, defaults assumed): {kinds}; {losing}"


def exposure(faults: FaultModel, gpus: int, sigterm_save_fits: bool | None) -> Exposure:
    """The job's exposure; a SIGTERM save of unknown length is taken as not fitting."""
    interruptions = faults.interruptions_per_second()
    lossy = tuple(name for name in interruptions if name not in WARNED_INTERRUPTIONS or not sigterm_save_fits)
    return Exposure(
        failure_rate=1 / faults.job_mtbf_seconds(gpus),
        interruptions=interruptions,
        lossy=lossy,
        max_seconds_without_checkpoint=faults.max_hours_without_checkpoint * 3600,
    )


@dataclass(frozen=True)
class StopCost:
    """What a stop whose SIGTERM save does not fit costs: the work since the last durable checkpoint (on
    average half an interval plus the durability delay, at most a whole one plus it) and a new job's start."""

    lost_seconds: float
    most_lost_seconds: float
    restart_seconds: float  # billed: image pull, restore, warm-up, failed tries included
    usd_per_hour: float | None  # the whole job's on-demand price; None: unpriced

    @property
    def hours(self) -> tuple[float, float]:
        """(average, most) hours of the job a stop costs."""
        return (
            (self.lost_seconds + self.restart_seconds) / 3600,
            (self.most_lost_seconds + self.restart_seconds) / 3600,
        )

    def as_dict(self) -> dict:
        average, most = self.hours
        price = self.usd_per_hour
        return {
            "hours_average": round(average, 3),
            "hours_most": round(most, 3),
            "usd_average": price and round(average * price, 2),
            "usd_most": price and round(most * price, 2),
        }

    def sentence(self) -> str:
        if not math.isfinite(self.restart_seconds):
            return "a stop, preemption or reclaim ends the run: a new job never comes back"
        average, most = self.hours
        text = (
            f"a stop, preemption or reclaim costs {average:,.2f} h of the job on average, {most:,.2f} h "
            "at most (the training since the last durable checkpoint, then a new job's "
            f"{self.restart_seconds:,.0f} s start)"
        )
        if self.usd_per_hour is None:
            return f"{text}; no price recorded for the instance type"
        price = self.usd_per_hour
        return f"{text}: ${average * price:,.0f} on average, ${most * price:,.0f} at most"
