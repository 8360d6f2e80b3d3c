"""The fault model: how often a GPU's job is interrupted, in the config (`fault_model`) and per profile.

Default per-GPU rate: Meta's Llama 3 405B pre-training ("The Llama 3 Herd of Models", Dubey et al. 2024,
arXiv 2407.21783, section 3.3.4, "Reliability and Operational Challenges"): 419 unexpected interruptions
in a 54-day snapshot on up to 16,384 H100 GPUs, about one every 3 hours, and "more than 90% effective
training time". As a per-GPU mean time between failures: 16,384 x 54 x 24 GPU-hours / 419 = 50,677 hours,
so a job on N GPUs fails every 50,677 / N hours (1,024 GPUs: 49.5 h). Failures are taken as independent
and exponential (a constant rate), the model the checkpoint-interval formulas assume (docs/plan.md,
"Goodput").

Which interruptions leave the instances healthy (in-job recovery can restart the workers without a new job,
docs/plan.md): Llama 3's table 5 sorts the 419 by root cause. Software bugs (54), NCCL watchdog timeouts (7)
and dependencies (2) leave the hosts healthy, the kinds the fault table calls hang, collective-timeout and
nccl (training_scripts/fault_table.py); every other row is hardware (GPUs, HBM3, network switches and
cables, host maintenance, NICs, ...: the fault table's hardware and efa kinds), which needs repaired or new
instances: 63 / 419 = 15.0 %. (The table's own percentage for faulty GPUs, 30.1 %, does not match its count,
148 / 419 = 35.3 %; the counts add up to 419, so the counts are used.) Counting network switches and
cables (35) as recoverable in place too, an assumption, would give 98 / 419 = 23.4 %.

Interruptions that are not failures (`fault_model.interruption_hours`): `trainstack stop`, a queue's
preemption, a spot reclaim, a training plan's end, a capacity loss and a deploy stop a job too. AWS publishes
none of their rates for SageMaker training, so each default below is assumed (named so in `trainstack plan`)
and meant to be replaced by the account's own. Every one but a capacity loss comes with SIGTERM
(StopTrainingJob, Batch's preemption through it, a spot reclaim and a training plan's end: SIGTERM, then
SIGKILL 120 s later; trainstack/planning/checkpoints.py), so it costs the work since the last durable
checkpoint only where a SIGTERM save does not fit; a capacity loss (instances taken without notice) always
does. `fault_model.max_hours_without_checkpoint` bounds the time between durable checkpoints whatever the
rates say.

`fault_model` at the top of the config applies to every profile; a profile's own `fault_model` wins for
that profile. `trainstack plan --from-history` estimates the figure from the
account's own runs.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import PrivateAttr, ValidationError, field_validator

from trainstack.base import StrictModel

LLAMA3_UNEXPECTED_INTERRUPTIONS = 419
LLAMA3_SNAPSHOT_DAYS = 54
LLAMA3_GPUS = 16_384
LLAMA3_GPU_MTBF_HOURS = LLAMA3_GPUS * LLAMA3_SNAPSHOT_DAYS * 24 / LLAMA3_UNEXPECTED_INTERRUPTIONS
# Llama 3's table 5: interruptions whose instances stay healthy (software bug, NCCL watchdog timeout,
# dependency) of the 419.
LLAMA3_HEALTHY_INSTANCE_INTERRUPTIONS = 54 + 7 + 2
HEALTHY_INSTANCE_SHARE = LLAMA3_HEALTHY_INSTANCE_INTERRUPTIONS / LLAMA3_UNEXPECTED_INTERRUPTIONS
LLAMA3_SOURCE = (
    "Llama 3 (arXiv 2407.21783, section 3.3.4): 419 unexpected interruptions in 54 days on 16,384 H100s"
)


# Interruptions that come with SIGTERM (a SIGTERM save keeps the work where it fits); the others do not.
WARNED_INTERRUPTIONS = ("stop", "queue_preemption", "spot", "training_plan_end", "deploy")
DEFAULT_MAX_HOURS_WITHOUT_CHECKPOINT = 1.0


class InterruptionHours(StrictModel):
    """Mean hours of a job's running between interruptions of each kind (None: never), per job. All assumed:
    AWS publishes no such rate for SageMaker training."""

    stop: float | None = 168.0  # `trainstack stop`: one a week of running
    queue_preemption: float | None = 168.0  # a higher-priority share's job preempts it (queue mode)
    spot: float | None = 24.0  # a spot reclaim (managed_spot profiles only): GPU spot capacity is scarce
    training_plan_end: float | None = 168.0  # a reservation ends (profiles with a training plan only)
    capacity_loss: float | None = 720.0  # instances taken without notice
    deploy: float | None = None  # a deploy leaves running executions and their jobs as they are (assumed)

    @field_validator("*")
    @classmethod
    def _positive(cls, value: float | None) -> float | None:
        if value is not None and not (value > 0 and math.isfinite(value)):
            raise ValueError(
                f"must be a positive number of hours of running between interruptions, got {value:g}"
            )
        return value


class FaultModel(StrictModel):
    # Hours one GPU runs, on average, between interruptions of the job it belongs to; None: Llama 3's.
    gpu_mtbf_hours: float | None = None
    interruption_hours: InterruptionHours = InterruptionHours()
    # The longest a job trains without a durable checkpoint, whatever the rates above.
    max_hours_without_checkpoint: float = DEFAULT_MAX_HOURS_WITHOUT_CHECKPOINT
    _on_spot: bool = PrivateAttr(default=False)
    _in_training_plan: bool = PrivateAttr(default=False)

    @field_validator("gpu_mtbf_hours")
    @classmethod
    def _positive(cls, value: float | None) -> float | None:
        if value is not None and not (value > 0 and math.isfinite(value)):
            raise ValueError(
                f"must be a positive number of hours (one GPU's mean time between job interruptions; "
                f"Llama 3's is {LLAMA3_GPU_MTBF_HOURS:,.0f}), got {value:g}"
            )
        return value

    @field_validator("max_hours_without_checkpoint")
    @classmethod
    def _bound(cls, value: float) -> float:
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"must be a positive number of hours, got {value:g}")
        return value

    def for_run(self, managed_spot: bool, training_plan: bool) -> FaultModel:
        """The model of a run: spot reclaims count only on spot capacity, a plan's end only inside a plan
        (neither counts for a model not made by this method)."""
        run = self.model_copy()
        run._on_spot, run._in_training_plan = managed_spot, training_plan
        return run

    def failures_only(self) -> FaultModel:
        """The same failures with no other interruption and no bound on the interval: the model that
        Llama 3's figures and the simulation (trainstack/planning/simulation.py) are compared with."""
        hours = InterruptionHours(**dict.fromkeys(InterruptionHours.model_fields))
        return self.model_copy(update={"interruption_hours": hours, "max_hours_without_checkpoint": math.inf})

    def interruptions_per_second(self) -> dict[str, float]:
        """The counted interruptions' rates per second of a job's running, by kind."""
        hours = self.interruption_hours.model_dump()
        hours["spot"] = hours["spot"] if self._on_spot else None
        hours["training_plan_end"] = hours["training_plan_end"] if self._in_training_plan else None
        return {name: 1 / (value * 3600) for name, value in hours.items() if value is not None}

    @property
    def gpu_mtbf(self) -> float:
        """Per-GPU MTBF in hours, the configured one or Llama 3's."""
        return self.gpu_mtbf_hours or LLAMA3_GPU_MTBF_HOURS

    @property
    def source(self) -> str:
        if self.gpu_mtbf_hours is None:
            return LLAMA3_SOURCE
        return "fault_model.gpu_mtbf_hours"

    def job_mtbf_seconds(self, gpus: int) -> float:
        """Mean time between failures of a job on `gpus` GPUs (any GPU's failure stops the job)."""
        return self.gpu_mtbf * 3600 / max(gpus, 1)


def inherit_fault_model(cls: type, data: Any) -> Any:
    """Settings' before-validator: each profile without a `fault_model` takes the config's."""
    if not isinstance(data, dict) or "fault_model" not in data or not isinstance(data.get("profiles"), list):
        return data
    inherited = data["fault_model"]
    try:
        FaultModel.model_validate(inherited)
    except ValidationError:
        return data  # reported once, under the config's own fault_model
    profiles = [
        {**profile, "fault_model": inherited}
        if isinstance(profile, dict) and "fault_model" not in profile
        else profile
        for profile in data["profiles"]
    ]
    return {**data, "profiles": profiles}
