"""A profile's two retry budgets (the `retry:` and `fault_retries:` blocks): capacity failures, and failures
for the infrastructure's fault (docs/faults.md). The pipeline's state machine applies both."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field, model_validator

from trainstack.base import StrictModel

# Attempt numbers are appended to the run name as "-<attempt>" (at most 3 digits). Each attempt runs
# in a child execution, so the pipeline's own history grows by a few events per attempt only.
MAX_ATTEMPTS_LIMIT = 999
# Infrastructure retries a profile may allow (each one is an attempt in the pipeline's history).
MAX_FAULT_RETRIES = 20


class Backoff(StrictModel):
    """Capped exponential back-off before each retry: initial * multiplier^k, at most max_backoff_seconds
    (the state machine adds up to 10 % jitter). `_field` names the block in error messages."""

    _field: ClassVar[str] = "retry"
    initial_backoff_seconds: Annotated[int, Field(ge=1, le=86_400)] = 60
    backoff_multiplier: Annotated[float, Field(ge=1, le=10)] = 2.0
    max_backoff_seconds: Annotated[int, Field(ge=1, le=86_400)] = 300

    @model_validator(mode="after")
    def _backoff_bounds(self) -> Backoff:
        if self.max_backoff_seconds < self.initial_backoff_seconds:
            raise ValueError(
                f"{self._field}.max_backoff_seconds ({self.max_backoff_seconds}) must be at least "
                f"{self._field}.initial_backoff_seconds ({self.initial_backoff_seconds})"
            )
        return self

    def backoffs(self, count: int) -> list[int]:
        """Seconds to wait before each of `count` retries."""
        waits: list[int] = []
        wait = float(self.initial_backoff_seconds)
        for _ in range(count):
            waits.append(min(round(wait), self.max_backoff_seconds))
            wait *= self.backoff_multiplier
        return waits


class RetryPolicy(Backoff):
    """How the state machine retries a job that failed for lack of capacity (CapacityError, or spot
    capacity that never came: Stopped/MaxWaitTimeExceeded).

    Defaults: the next attempt starts at most 300 s (plus up to 10 % jitter) after a capacity failure,
    for up to 48 hours; 600 attempts cover those 48 hours even when every attempt fails at once.
    """

    max_attempts: Annotated[int, Field(ge=1, le=MAX_ATTEMPTS_LIMIT)] = 600
    deadline_hours: Annotated[float, Field(gt=0, le=24 * 14)] = 48

    def backoff_schedule(self) -> list[int]:
        """Seconds to wait before attempts 2..max_attempts: initial * multiplier^k, capped at max_backoff."""
        return self.backoffs(self.max_attempts - 1)


class FaultRetryPolicy(Backoff):
    """How the state machine retries a job that failed for the infrastructure's fault (trainstack.faults:
    a hang the watchdog caught, NCCL/EFA or network errors, hardware, SageMaker internal errors): the
    next attempt resumes from the run's latest checkpoint (same checkpoint S3 prefix).

    Defaults: up to 3 retries, 60 s doubling to at most 600 s (plus up to 10 % jitter), and none after
    half of the run's time limit has passed, so that a retried attempt keeps the other half to finish.
    An unknown failure is retried once, on the same back-off and deadline.
    """

    _field: ClassVar[str] = "fault_retries"
    max_retries: Annotated[int, Field(ge=0, le=MAX_FAULT_RETRIES)] = 3
    # No retry starts once this share of the run's time limit (from the execution's start to when the
    # pipeline stops the job: maxRuntimeHours + retry deadline + start-up allowance) has passed.
    max_deadline_share: Annotated[float, Field(gt=0, le=1)] = 0.5
    max_backoff_seconds: Annotated[int, Field(ge=1, le=86_400)] = 600
