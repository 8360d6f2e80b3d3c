"""A training plan's planned interruption: checkpoint and stop before the plan ends the job's instances.

SageMaker gives a job on a training plan the end of its current capacity block in the environment,
SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP (epoch milliseconds; '0' or unset: no block), and
begins terminating the block's instances 30 minutes before that end ("Training plans utilization for
SageMaker training jobs", SageMaker developer guide: "You have full access to all reserved instances until
30 minutes before the Reserved Capacity end time"; its checkpoint example reads the same variable). The
variable is the job's own block, whichever of the instance preferences SageMaker chose, so train.py
needs nothing from the pipeline for it.

train.py stops --plan-stop-margin-seconds before the instances' end (time for the last checkpoint to be
written and uploaded): every rank agrees on it in the per-step flags (train.py `_agree`), saves the
checkpoint, and the job ends as `trainstack-fault:infrastructure:plan-ending`, which the pipeline reads
as "continue on the next instance preference" (docs/faults.md, "Planned interruptions"), not a failure.
"""

import argparse
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime

from faults import PLAN_ENDING

EXPIRATION_ENV = "SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"
INSTANCES_END_BEFORE_SECONDS = 30 * 60  # SageMaker starts terminating the block's instances then
# Why a step asks every rank to stop (train.py `_agree` takes the largest): the job is being stopped
# (SIGTERM), or the capacity block's instances are about to end.
STOP_SIGTERM = 1
STOP_PLAN_ENDING = 2


class PlanEndingError(Exception):
    """The capacity block ends the instances soon: the checkpoint is written, the attempt ends."""

    fault = PLAN_ENDING


def add_flags(add: Callable, non_negative_seconds: Callable) -> None:
    add(
        "--plan-stop-margin-seconds",
        type=non_negative_seconds,
        default=600.0,
        help="on a training plan, stop this long before SageMaker starts ending the instances (30 minutes "
        "before the capacity block ends), after a checkpoint",
    )


class CapacityBlock:
    """When this job must stop for its capacity block; `ending()` once that time has come."""

    def __init__(self, expires_ms: int, margin_seconds: float, clock: Callable[[], float] = time.time):
        self.instances_end = expires_ms / 1000 - INSTANCES_END_BEFORE_SECONDS if expires_ms else None
        self.stop_at = self.instances_end - margin_seconds if self.instances_end else None
        self.clock = clock

    @classmethod
    def from_environment(cls, args: argparse.Namespace) -> "CapacityBlock":
        return cls(int(os.environ.get(EXPIRATION_ENV, "0") or "0"), args.plan_stop_margin_seconds)

    def ending(self) -> bool:
        return self.stop_at is not None and self.clock() >= self.stop_at

    def error(self, step: int) -> PlanEndingError:
        ends = datetime.fromtimestamp(self.instances_end, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return PlanEndingError(
            f"The training plan's capacity block ends this job's instances from {ends}, so training stopped "
            f"after the checkpoint of step {step}; the run continues from it on the next instance preference."
        )
