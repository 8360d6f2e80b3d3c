"""Queue mode's settings (the `queue:` section of the config): an AWS Batch job queue for SageMaker
Training that holds training jobs until instances are free (docs/queue.md)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator

from trainstack.base import StrictModel

# AWS Batch share identifiers: letters and digits only (the API reference says alphanumeric).
_SHARE_NAME = re.compile(r"[A-Za-z0-9]{1,255}")
# Batch's jobStateTimeLimitActions accept 600 to 86,400 seconds.
CAPACITY_WAIT_HOURS_RANGE = (600 / 3600, 86_400 / 3600)
MAX_SHARES = 500  # share identifiers active in one Batch job queue


def training_queue_name(project: str) -> str:
    """The AWS Batch job queue (and service environment) of queue mode; the CLI finds the queue by it."""
    return f"{project}-training"


class QueueSettings(StrictModel):
    """Queue mode: attempts go through an AWS Batch job queue for SageMaker Training (docs/queue.md)."""

    enabled: bool = False
    # The service environment's capacity limit, in instances; keep it at or below the account quota.
    max_instances: Annotated[int, Field(ge=1, le=10_000)] = 8
    # Fair-share weights, {share name: weight}: a share of weight 2 gets twice the instances of a share of
    # weight 1 while both have jobs waiting. Empty: one first-in, first-out queue.
    shares: dict[str, int] = {}
    # How long a job may wait RUNNABLE after capacity errors before Batch terminates it.
    capacity_wait_hours: float = 24

    @field_validator("shares")
    @classmethod
    def _share_names_and_weights(cls, value: dict[str, int]) -> dict[str, int]:
        for name, weight in value.items():
            if not _SHARE_NAME.fullmatch(name):
                raise ValueError(
                    f"share name '{name}' may hold only letters and digits (at most 255), "
                    "as AWS Batch share identifiers do"
                )
            if not 1 <= weight <= 1000:
                raise ValueError(
                    f"share '{name}' has weight {weight}; weights are whole numbers from 1 to 1000"
                )
        if len(value) > MAX_SHARES:
            raise ValueError(f"at most {MAX_SHARES} shares are allowed (AWS Batch's limit per job queue)")
        return value

    @field_validator("capacity_wait_hours")
    @classmethod
    def _batch_time_limit(cls, value: float) -> float:
        low, high = CAPACITY_WAIT_HOURS_RANGE
        if not low <= value <= high:
            raise ValueError(
                f"{value:g} is outside AWS Batch's job state time limit; "
                "use 0.17 (10 minutes) to 24 hours"
            )
        return value

    @property
    def capacity_wait_seconds(self) -> int:
        return round(self.capacity_wait_hours * 3600)
