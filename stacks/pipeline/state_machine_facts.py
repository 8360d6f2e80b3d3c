"""Facts the training state machines are built from: error names, time limits, the poll schedule and the
history-event budget, and the `${Name}` placeholders through which deploy-time values enter.

The definitions refer to deploy-time values only through placeholders that CloudFormation's
DefinitionSubstitutions fill in; tests fill them with fake values and run the very same text in the
local interpreter.

History budget: a standard execution keeps at most 25,000 events. Each attempt runs in a child
execution (attempt/training_attempt.py), so the pipeline's history grows by a few events per attempt and
an attempt's history holds one job's polls. Polls are adaptive: every POLL_MIN_SECONDS while a job is
young, then POLL_AGE_FRACTION of its age, at most POLL_MAX_SECONDS; the longest job the pipeline
allows (28 days of runtime plus its allowances) therefore needs fewer than 2,000 polls.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from trainstack.faults import UNKNOWN_RETRIES
from trainstack.job_request import PipelineResources
from trainstack.profiles import MAX_RUNTIME_HOURS_LIMIT, Profile

ERROR_INVALID_INPUT = "InvalidInput"
ERROR_CAPACITY_EXHAUSTED = "CapacityExhausted"
ERROR_QUOTA_EXCEEDED = "QuotaExceeded"
ERROR_TRAINING_FAILED = "TrainingFailed"
ERROR_TRAINING_STOPPED = "TrainingStopped"
ERROR_INFRASTRUCTURE_RETRIES_EXHAUSTED = "InfrastructureRetriesExhausted"
ERROR_BUDGET_EXCEEDED = "BudgetExceeded"
ERROR_REGISTRATION_FAILED = "RegistrationFailed"

# Step Functions' hard limit on a standard execution's history, and the budget this project keeps to.
HISTORY_EVENT_LIMIT = 25_000
HISTORY_EVENT_BUDGET = 20_000

POLL_MIN_SECONDS = 60
POLL_MAX_SECONDS = 1800
POLL_AGE_FRACTION = 0.05
# Time a job may spend outside MaxRuntimeInSeconds (provisioning, download, upload) before the
# pipeline stops it itself: bounds every execution's length, hence its history.
STARTUP_ALLOWANCE_SECONDS = 6 * 3600


def poll_seconds(age_seconds: float) -> int:
    """The wait before the next DescribeTrainingJob of a job created `age_seconds` ago (as the machine
    computes it: see poll_seconds_expression)."""
    return max(POLL_MIN_SECONDS, min(POLL_MAX_SECONDS, round(age_seconds * POLL_AGE_FRACTION)))


def poll_seconds_expression(age_seconds: str) -> str:
    return (
        f"$max([{POLL_MIN_SECONDS}, $min([{POLL_MAX_SECONDS}, $round({age_seconds} * {POLL_AGE_FRACTION})])])"
    )


def polls_until(seconds: int) -> int:
    """DescribeTrainingJob calls of a job that stays InProgress for `seconds`."""
    age, polls = 0, 0
    while age <= seconds:
        age += poll_seconds(age)
        polls += 1
    return polls


def extra_time_seconds(profile: Profile) -> int:
    """Time beyond MaxRuntimeInSeconds before the pipeline stops a job: the retry deadline, the start-up
    allowance and, on spot, the wait for capacity."""
    spot_wait = round(profile.max_wait_hours * 3600) if profile.managed_spot else 0
    return round(profile.retry.deadline_hours * 3600) + STARTUP_ALLOWANCE_SECONDS + spot_wait


def longest_time_limit_seconds(profile: Profile) -> int:
    """The time limit of the profile's longest allowed run (28 days, or max_wait_hours on spot)."""
    hours = profile.max_wait_hours if profile.managed_spot else MAX_RUNTIME_HOURS_LIMIT
    return round(hours * 3600) + extra_time_seconds(profile)


def execution_timeout_seconds(profiles: Sequence[Profile]) -> int:
    """The pipeline's own TimeoutSeconds: above every profile's longest time limit."""
    return max(longest_time_limit_seconds(profile) for profile in profiles) + 3600


def worst_case_history(
    profile: Profile, *, per_poll: int, per_attempt: int, pipeline_fixed: int, attempt_fixed: int
) -> dict[str, int]:
    """Events of the profile's longest execution with every attempt used (capacity attempts, fault
    retries, the unknown failure's retry and the quota refusals that move on to another preference
    outside the capacity budget: quota_waits.py), from measured unit costs:
    the pipeline's own history and the longest attempt's (a job polled until its time limit)."""
    quota_hops = len(profile.instance_preferences) - 1
    attempts = profile.retry.max_attempts + profile.fault_retries.max_retries + UNKNOWN_RETRIES + quota_hops
    return {
        "pipeline": pipeline_fixed + attempts * per_attempt,
        "attempt": attempt_fixed + polls_until(longest_time_limit_seconds(profile)) * per_poll,
    }


def evaluation_jobs_allowed(profile: Profile) -> int:
    """The most evaluation jobs one registration may try (registry/evaluation_states.py): every capacity
    try, infrastructure retry and the unknown failure's retry."""
    return profile.retry.max_attempts + profile.fault_retries.max_retries + UNKNOWN_RETRIES


def worst_case_registration_history(
    profile: Profile, *, per_job: int, per_poll: int, registration_fixed: int
) -> int:
    """Events of the registration machine's longest execution for `profile`: every evaluation job it may
    try, each polled (`per_poll` events in this machine: none while each job runs in its own attempt
    execution) until the run's longest time limit. Each job's own polls are its attempt execution's, bounded
    as a training attempt's (worst_case_history: the same machine and time limit)."""
    polls = polls_until(longest_time_limit_seconds(profile))
    return registration_fixed + evaluation_jobs_allowed(profile) * (per_job + polls * per_poll)


def placeholder(name: str) -> str:
    return "${" + name + "}"


def substitution_names(resources: PipelineResources) -> dict[str, str]:
    """PipelineResources with deploy-time values -> the same with `${Name}` placeholders, and their names.

    Returns {placeholder name: field path}; the caller maps each name to its CloudFormation value.
    """
    names = {
        "SageMakerRoleArn": "role_arn",
        "TrainingImageUri": "image_uri",
        "CheckpointBucket": "checkpoint_bucket",
        "ArtifactBucket": "artifact_bucket",
        "DatasetBucket": "dataset_bucket",
    }
    names.update(
        {f"TrainingSubnet{index}": f"subnet_ids.{index}" for index in range(len(resources.subnet_ids))}
    )
    names.update(
        {
            f"TrainingSecurityGroup{index}": f"security_group_ids.{index}"
            for index in range(len(resources.security_group_ids))
        }
    )
    if resources.file_system_id is not None:
        names.update(
            {"FileSystemId": "file_system_id", "FileSystemDirectoryPath": "file_system_directory_path"}
        )
    if resources.checkpoint_file_system_path is not None:
        names["CheckpointDirectoryPath"] = "checkpoint_file_system_path"  # the fsx store's, the team's
    if resources.kms_key_arn is not None:
        names["RunDataKeyArn"] = "kms_key_arn"
    if resources.express_checkpoint_bucket is not None:
        names["ExpressCheckpointBucket"] = "express_checkpoint_bucket"
    return names


def resource_value(resources: PipelineResources, path: str) -> str:
    field, _, index = path.partition(".")
    value = getattr(resources, field)
    return value[int(index)] if index else value


def with_placeholders(resources: PipelineResources) -> PipelineResources:
    """The same resources with every deploy-time value replaced by its `${Name}` placeholder."""
    return with_values(resources, {name: placeholder(name) for name in substitution_names(resources)})


def with_values(resources: PipelineResources, values: dict[str, str]) -> PipelineResources:
    """The same resources with the deploy-time value of each substitution name replaced by values[name]."""
    by_field: dict[str, Any] = {}
    for name, path in substitution_names(resources).items():
        field, _, index = path.partition(".")
        if index:
            by_field.setdefault(field, []).append(values[name])
        else:
            by_field[field] = values[name]
    return replace(
        resources,
        **{key: tuple(value) if isinstance(value, list) else value for key, value in by_field.items()},
    )


# -------------------------------------------------- used by stacks/pipeline/cleanup/job_cleanup.py (JSONPath)

# SageMaker throttling arrives as SageMaker.SageMakerException under aws-sdk:sagemaker:* (only errors
# in SageMaker's API model get their own name): retry it with capped, jittered exponential backoff.
THROTTLE_RETRY = {
    "ErrorEquals": ["SageMaker.SageMakerException"],
    "IntervalSeconds": 5,
    "BackoffRate": 2,
    "MaxAttempts": 6,
    "MaxDelaySeconds": 120,
    "JitterStrategy": "FULL",
}


def sagemaker_resource(partition: str, action: str) -> str:
    return f"arn:{partition}:states:::aws-sdk:sagemaker:{action}"


def definition_json(definition: dict[str, Any]) -> str:
    return json.dumps(definition, separators=(",", ":"))
