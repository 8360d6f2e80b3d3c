"""Queue mode's settings (the `queue:` section of the config): an AWS Batch job queue for SageMaker
Training that holds training jobs until instances are free (docs/queue.md)."""

from __future__ import annotations

import hashlib
import re
from typing import Annotated

from pydantic import Field, field_validator

from trainstack.base import StrictModel
from trainstack.retry_policies import MAX_ATTEMPTS_LIMIT

# AWS Batch share identifiers: letters and digits only (the API reference says alphanumeric).
_SHARE_NAME = re.compile(r"[A-Za-z0-9]{1,255}")
# Batch's jobStateTimeLimitActions accept 600 to 86,400 seconds.
CAPACITY_WAIT_HOURS_RANGE = (600 / 3600, 86_400 / 3600)
MAX_SHARES = 500  # share identifiers active in one Batch job queue


def training_queue_name(project: str) -> str:
    """The AWS Batch job queue (and service environment) of queue mode; the CLI finds the queue by it."""
    return f"{project}-training"


def run_names_table_name(project: str) -> str:
    """Queue mode's DynamoDB table of claimed run names (stacks/pipeline/queue/run_names.py)."""
    return f"{project}-run-names"


# Batch names the training job of a service job `AWSBatch<jobName><attemptId>` (Batch user guide's
# example ARNs; the service-linked role may touch only `training-job/AWSBatch*`), the attempt id 32 hex
# digits there, and SageMaker allows 63 characters in a training job name (botocore's sagemaker model,
# TrainingJobName). Whether Batch cuts a longer name or SageMaker refuses it is not documented: the
# service jobs we submit are named within the 23 characters left.
BATCH_TRAINING_JOB_PREFIX = "AWSBatch"
BATCH_ATTEMPT_ID_LENGTH = 32
SERVICE_JOB_NAME_MAX_LENGTH = 63 - len(BATCH_TRAINING_JOB_PREFIX) - BATCH_ATTEMPT_ID_LENGTH
# Service job names: <queue key><run key>-<attempt>. Hex digits of SHA-256, which Step Functions' JSONata
# $hash computes as Python's hashlib does, so the state machines name and find the same jobs.
QUEUE_KEY_LENGTH = 6
RUN_KEY_LENGTH = SERVICE_JOB_NAME_MAX_LENGTH - QUEUE_KEY_LENGTH - 1 - len(str(MAX_ATTEMPTS_LIMIT))


def _key(text: str, length: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def queue_job_prefix(queue_name: str) -> str:
    """What every service job of this queue is named with first; the training jobs Batch starts for them
    are `AWSBatch<this>...`, which is how IAM grants name them."""
    return _key(queue_name, QUEUE_KEY_LENGTH)


def run_job_prefix(queue_name: str, run_name: str) -> str:
    """The names of a run's service jobs up to the attempt number: `<queue key><run key>-`."""
    return f"{queue_job_prefix(queue_name)}{_key(run_name, RUN_KEY_LENGTH)}-"


def service_job_name(queue_name: str, run_name: str, attempt: int | str) -> str:
    """The service job of a run's attempt: short enough that Batch's training job name fits SageMaker's
    63 characters, unique per run (48 bits of the run name's hash) and attempt (a number, or an evaluation
    job's evaluation_job_key)."""
    return f"{run_job_prefix(queue_name, run_name)}{attempt}"


# An evaluation job's service job ends `e<n in base 36>` (JSONata's $formatBase, lower case): no training
# attempt's (digits only), and within the attempt number's characters for every evaluation job a run may try.
EVALUATION_KEY_PREFIX = "e"


def evaluation_job_key(number: int) -> str:
    """The service job name's end for the run's `number`-th evaluation job (trainstack.registry)."""
    digits = ""
    while number:
        number, digit = divmod(number, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[digit] + digits
    return EVALUATION_KEY_PREFIX + digits


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
                f"{value:g} is outside AWS Batch's job state time limit; use 0.17 (10 minutes) to 24 hours"
            )
        return value

    @property
    def capacity_wait_seconds(self) -> int:
        return round(self.capacity_wait_hours * 3600)
