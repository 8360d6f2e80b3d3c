"""The training pipeline's Amazon States Language definition (JSONPath, STANDARD), built as plain data.

The definition refers to deploy-time values only through `${Name}` placeholders that CloudFormation's
DefinitionSubstitutions fill in (see SUBSTITUTIONS); tests fill them with fake values and run the very
same text in moto's interpreter. Per profile, the CreateTrainingJob base request comes from
trainstack.job_request.base_request, and the per-run fields are applied in the states below exactly
as build_create_training_job_request applies them (same builder, two paths).

What JSONPath cannot do, and how this definition does it instead:
- no multiplication: maxRuntimeHours -> seconds is `round(hours * 100) * 36`, the decimal shift by
  formatting `<hours>e2` and parsing it back, the *36 by nested States.MathAdd doubling (32x + 4x);
  maxRuntimeHours therefore has a resolution of 0.01 h (36 s).
- no clock arithmetic: the retry deadline and the overall time limit are checked against the sum of
  the waits the execution made (poll waits plus backoffs), which trails wall-clock time by the API
  latencies only.
- no string length: runName length is left to SageMaker's job-name validation (ValidationException
  on CreateTrainingJob, reported as InvalidInput before any job exists).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from trainstack.execution_input import FIELDS, MAX_INSTANCE_COUNT, RUN_NAME_MAX_LENGTH
from trainstack.job_request import (
    EXECUTION_TAG,
    RUN_TAG,
    PipelineResources,
    base_request,
    checkpoint_uri,
    instance_preferences,
    output_path,
    resume_channel,
)
from trainstack.profiles import MAX_RUNTIME_HOURS_LIMIT, RESERVED_HYPERPARAMETERS, Profile

# Step Functions' hard limit on a standard execution's history.
HISTORY_EVENT_LIMIT = 25_000
# History events one poll iteration adds: Describe task (5) + status Choice (2) + clock Pass (2) +
# Wait (2). tests/pipeline measures it from a real execution.
EVENTS_PER_POLL = 11
CREATE_THROTTLE_RETRIES = 6
# Events of one failed attempt besides its polls (start and name passes, the create task, the final
# describe, classification, backoff; 28 measured) plus 3 per throttling retry of the create task.
EVENTS_PER_ATTEMPT = 30 + 3 * CREATE_THROTTLE_RETRIES
# Events of a one-attempt execution besides its polls: input checks, run preparation, the attempt,
# the result (65 measured).
EVENTS_FIXED = 70
# SageMaker API throttling is transient: retry with capped, jittered exponential backoff.
THROTTLE_RETRY = {
    "ErrorEquals": ["SageMaker.ThrottlingException"],
    "IntervalSeconds": 5,
    "BackoffRate": 2,
    "MaxAttempts": CREATE_THROTTLE_RETRIES,
    "MaxDelaySeconds": 120,
    "JitterStrategy": "FULL",
}

# While a job is starting (SageMaker provisioning, image and data download), poll every
# STARTUP_POLL_SECONDS for at most STARTUP_POLL_WINDOW_SECONDS of each attempt; otherwise poll at the
# interval of the execution's time-limit tier.
STARTUP_POLL_SECONDS = 60
STARTUP_POLL_WINDOW_SECONDS = 900
STARTUP_SECONDARY_STATUSES = (
    "Starting",
    "Pending",
    "LaunchingMLInstances",
    "PreparingTrainingStack",
    "Downloading",
    "DownloadingTrainingImage",
)
# Time a job may spend outside MaxRuntimeInSeconds (provisioning, download, upload) before the
# pipeline stops it itself: bounds every execution's length, hence its history.
STARTUP_ALLOWANCE_SECONDS = 6 * 3600
# Upper bounds (seconds) of the execution time-limit tiers; the poll interval of each is derived.
TIME_LIMIT_TIERS = (1 * 86_400, 3 * 86_400, 7 * 86_400, 14 * 86_400, 30 * 86_400, 60 * 86_400)
MIN_POLL_SECONDS = 120
# Capacity backoff jitter: up to this fraction of each backoff is added at random.
JITTER_FRACTION = 0.1

RUN_NAME_CHARACTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-"

_RUN_PLACEHOLDER = "RUN-NAME-PLACEHOLDER"
_URI_PLACEHOLDER = "s3://resume-placeholder/"

ERROR_INVALID_INPUT = "InvalidInput"
ERROR_CAPACITY_EXHAUSTED = "CapacityExhausted"
ERROR_QUOTA_EXCEEDED = "QuotaExceeded"
ERROR_TRAINING_FAILED = "TrainingFailed"
ERROR_TRAINING_STOPPED = "TrainingStopped"


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


def sagemaker_resource(partition: str, action: str) -> str:
    return f"arn:{partition}:states:::aws-sdk:sagemaker:{action}"


# ---------------------------------------------------------------- poll plan (history-event budget)


@dataclass(frozen=True)
class PollTier:
    time_limit_seconds: int  # executions whose time limit is at most this use...
    poll_seconds: int  # ...this interval while a job trains


def startup_polls_per_attempt() -> int:
    return STARTUP_POLL_WINDOW_SECONDS // STARTUP_POLL_SECONDS + 1


def attempt_events() -> int:
    return EVENTS_PER_ATTEMPT + startup_polls_per_attempt() * EVENTS_PER_POLL


def poll_tiers(max_attempts: int) -> list[PollTier]:
    """Poll intervals that keep any execution of up to `max_attempts` attempts under the history limit."""
    budget = HISTORY_EVENT_LIMIT - EVENTS_FIXED - max_attempts * attempt_events()
    long_polls = budget // EVENTS_PER_POLL - 2
    if long_polls < 100:
        raise ValueError(
            f"retry.max_attempts of {max_attempts} leaves too little of Step Functions' "
            f"{HISTORY_EVENT_LIMIT}-event history for polling; use at most {max_attempts_limit()} attempts"
        )
    return [
        PollTier(limit, max(MIN_POLL_SECONDS, _round_up(math.ceil(limit / long_polls), 60)))
        for limit in TIME_LIMIT_TIERS
    ]


def max_attempts_limit() -> int:
    return (HISTORY_EVENT_LIMIT - EVENTS_FIXED - (100 + 2) * EVENTS_PER_POLL) // attempt_events()


def time_limit_seconds(profile: Profile, max_runtime_seconds: int) -> int:
    """The pipeline stops a job (TrainingStopped) once the execution has waited this long."""
    return max_runtime_seconds + extra_time_seconds(profile)


def extra_time_seconds(profile: Profile) -> int:
    spot_wait = round(profile.max_wait_hours * 3600) if profile.managed_spot else 0
    return round(profile.retry.deadline_hours * 3600) + STARTUP_ALLOWANCE_SECONDS + spot_wait


def worst_case_history_events(
    profile: Profile,
    tiers: Sequence[PollTier],
    events_per_poll: int,
    events_per_attempt: int,
    events_fixed: int,
) -> int:
    """History events of the longest execution the profile allows (every attempt used, 28-day runtime)."""
    longest_runtime = round(
        (profile.max_wait_hours if profile.managed_spot else MAX_RUNTIME_HOURS_LIMIT) * 3600
    )
    limit = time_limit_seconds(profile, longest_runtime)
    tier = next(tier for tier in tiers if limit <= tier.time_limit_seconds)
    attempts = profile.retry.max_attempts
    attempt_cost = events_per_attempt + startup_polls_per_attempt() * events_per_poll
    long_polls = limit // tier.poll_seconds + 2
    return events_fixed + attempts * attempt_cost + long_polls * events_per_poll


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


# ---------------------------------------------------------------- definition


def _reject(cause: str | None = None, cause_format: tuple[str, ...] | None = None) -> dict[str, Any]:
    """A Pass that sets the InvalidInput cause, then the one InvalidInput Fail state."""
    parameters = {"cause": cause} if cause is not None else {"cause.$": _format(*cause_format)}
    return {"Type": "Pass", "Parameters": parameters, "Next": "InvalidInput"}


def _format(template: str, *paths: str) -> str:
    escaped = template.replace("\\", "\\\\").replace("'", "\\'")
    args = "".join(f", {path}" for path in paths)
    return f"States.Format('{escaped}'{args})"


def _times(path: str, factor: int) -> str:
    """`path * factor` as nested States.MathAdd (JSONPath has no multiplication)."""
    powers: list[str] = [path]
    while 2 ** len(powers) <= factor:
        previous = powers[-1]
        powers.append(f"States.MathAdd({previous}, {previous})")
    terms = [powers[bit] for bit in range(len(powers)) if factor >> bit & 1]
    expression = terms[0]
    for term in terms[1:]:
        expression = f"States.MathAdd({expression}, {term})"
    return expression


def _is_present(variable: str) -> dict[str, Any]:
    return {"Variable": variable, "IsPresent": True}


def _present_and(variable: str, *conditions: dict[str, Any]) -> dict[str, Any]:
    return {
        "And": [_is_present(variable), {"Or": list(conditions)} if len(conditions) > 1 else conditions[0]]
    }


def _not_number_in_range(variable: str, below: tuple[str, float], maximum: float) -> list[dict[str, Any]]:
    """Choice conditions that hold when the field is not a number, or is one outside (below, maximum]."""
    operator, bound = below
    return [
        {"Not": {"Variable": variable, "IsNumeric": True}},
        {
            "And": [
                {"Variable": variable, "IsNumeric": True},
                {
                    "Or": [
                        {"Variable": variable, operator: bound},
                        {"Variable": variable, "NumericGreaterThan": maximum},
                    ]
                },
            ]
        },
    ]


def _template(value: Any, leaves: dict[str, str]) -> Any:
    """Turn placeholder leaves of a request fragment into Parameters paths/intrinsics ("Key.$")."""
    if isinstance(value, dict):
        result: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(item, str) and item in leaves:
                result[f"{key}.$"] = leaves[item]
            else:
                result[key] = _template(item, leaves)
        return result
    if isinstance(value, list):
        return [_template(item, leaves) for item in value]
    return value


def _plain_number(value: float) -> float | int:
    """8.0 -> 8, as the CLI's messages print it (:g)."""
    return int(value) if float(value).is_integer() else value


def _valid_instance_counts(profile: Profile) -> list[int]:
    return [
        count for count in range(1, MAX_INSTANCE_COUNT + 1) if profile.instance_count_problem(count) is None
    ]


def _describe_counts(counts: list[int]) -> str:
    if not counts:
        return "none"
    if counts == list(range(counts[0], counts[-1] + 1)):
        return f"{counts[0]}" if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
    return ", ".join(map(str, counts))


def _profile_state(profile: Profile, resources: PipelineResources, project: str) -> dict[str, Any]:
    request = base_request(profile, resources)
    uncounted = dict(request["ResourceConfig"])
    uncounted.pop("InstanceCount", None)
    if profile.uses_instance_preferences:
        uncounted["InstancePreferences"] = instance_preferences(profile, counted=False)
    spot_type = request["ResourceConfig"].get("InstanceType")
    valid_counts = _valid_instance_counts(profile)
    restricted = valid_counts != list(range(1, MAX_INSTANCE_COUNT + 1))
    backoffs = profile.retry.backoff_schedule()
    max_runtime_hours = _plain_number(
        profile.max_wait_hours if profile.managed_spot else MAX_RUNTIME_HOURS_LIMIT
    )
    return {
        "Type": "Pass",
        "Comment": f"Profile {profile.name}: its CreateTrainingJob base request and retry policy.",
        "Parameters": {
            "input.$": "$.input",
            # Every field, in FIELDS order: the unknown-field check compares key orders.
            "defaults": {
                "profile": profile.name,
                "runName.$": _format(f"{project}-{{}}", "$$.Execution.Name"),
                "hyperparameters": {},
                **{name: None for name in ("instanceCount", "maxRuntimeHours", "resumeFrom")},
            },
            "profile": {
                "name": profile.name,
                "maxAttempts": profile.retry.max_attempts,
                # Padded so that ArrayGetItem(attempt - 1) exists even when max_attempts is 1.
                "backoffSeconds": backoffs or [0],
                "jitterSeconds": [math.floor(wait * JITTER_FRACTION) for wait in backoffs] or [0],
                "deadlineSeconds": round(profile.retry.deadline_hours * 3600),
                "extraTimeSeconds": extra_time_seconds(profile),
                "maxRuntimeHoursLimit": max_runtime_hours,
                # Listed only when the profile rules some counts out (512 numbers cost parse time).
                "instanceCountRestricted": restricted,
                "validInstanceCounts": valid_counts if restricted else [],
                "validInstanceCountsText": _describe_counts(valid_counts),
                "uncountedResourceConfig": uncounted,
                "selectedDefaults": {
                    "SelectedInstanceType": spot_type,
                    "SelectedInstanceCount": request["ResourceConfig"].get("InstanceCount"),
                },
            },
            "request": request,
        },
        "Next": "ApplyInputDefaults",
    }


def _input_states(profiles: Sequence[Profile], project: str, partition: str) -> dict[str, Any]:
    names = ", ".join(profile.name for profile in profiles)
    rejections = {
        "RejectInputShape": _reject(
            f"The input must be a JSON object with the optional fields {', '.join(FIELDS)}."
        ),
        "RejectUnknownFields": _reject(
            f"The input has unknown field(s); allowed fields: {', '.join(FIELDS)}."
        ),
        "RejectProfileType": _reject(f"profile must be a string naming one of: {names}."),
        "RejectProfile": _reject(f"profile must be one of: {names}."),
        "RejectRunNameType": _reject(f"runName must be a string starting with '{project}-'."),
        "RejectRunNamePrefix": _reject(
            f"runName must start with '{project}-' (the pipeline may only create jobs named so)."
        ),
        "RejectRunNameCharacters": _reject(
            "runName may hold only letters, digits and single hyphens "
            f"(pattern ^[a-zA-Z0-9](-*[a-zA-Z0-9])*$) and at most {RUN_NAME_MAX_LENGTH} characters."
        ),
        "RejectHyperparametersType": _reject(
            "hyperparameters must be a JSON object of string names to string values."
        ),
        "RejectReservedHyperparameters": _reject(
            f"hyperparameters may not set {', '.join(RESERVED_HYPERPARAMETERS)}: "
            "the profile's strategy sets them."
        ),
        "RejectInstanceCount": _reject(
            f"instanceCount must be a whole number from 1 to {MAX_INSTANCE_COUNT}."
        ),
        "RejectInstanceCountForProfile": _reject(
            cause_format=(
                "instanceCount {} does not fit profile {}: it allows {}.",
                "$.input.instanceCount",
                "$.profile.name",
                "$.profile.validInstanceCountsText",
            )
        ),
        "RejectMaxRuntimeHours": _reject(
            "maxRuntimeHours must be a number greater than 0 and at most "
            f"{MAX_RUNTIME_HOURS_LIMIT} (28 days)."
        ),
        "RejectMaxRuntimeHoursForProfile": _reject(
            cause_format=(
                "maxRuntimeHours must be at most {} for profile {}.",
                "$.profile.maxRuntimeHoursLimit",
                "$.profile.name",
            )
        ),
        "RejectResumeFrom": _reject("resumeFrom must be an S3 URI such as s3://bucket/run-name/."),
        "InvalidInput": {"Type": "Fail", "Error": ERROR_INVALID_INPUT, "CausePath": "$.cause"},
    }
    check_types = {
        "Type": "Choice",
        "Comment": f"Type and range checks on the raw input (fields: {', '.join(FIELDS)}).",
        "Choices": [
            {"Not": {"Variable": "$.inputJson", "StringMatches": "{*"}, "Next": "RejectInputShape"},
            {
                **_present_and("$.input.profile", {"Not": {"Variable": "$.input.profile", "IsString": True}}),
                "Next": "RejectProfileType",
            },
            {
                **_present_and("$.input.runName", {"Not": {"Variable": "$.input.runName", "IsString": True}}),
                "Next": "RejectRunNameType",
            },
            {
                **_present_and(
                    "$.input.hyperparameters",
                    *(
                        {"Variable": "$.input.hyperparameters", test: True}
                        for test in ("IsString", "IsNumeric", "IsBoolean", "IsNull")
                    ),
                ),
                "Next": "RejectHyperparametersType",
            },
            {
                **_present_and(
                    "$.input.instanceCount",
                    *_not_number_in_range(
                        "$.input.instanceCount", ("NumericLessThan", 1), MAX_INSTANCE_COUNT
                    ),
                ),
                "Next": "RejectInstanceCount",
            },
            {
                **_present_and(
                    "$.input.maxRuntimeHours",
                    *_not_number_in_range(
                        "$.input.maxRuntimeHours", ("NumericLessThanEquals", 0), MAX_RUNTIME_HOURS_LIMIT
                    ),
                ),
                "Next": "RejectMaxRuntimeHours",
            },
            {
                **_present_and(
                    "$.input.resumeFrom",
                    {"Not": {"Variable": "$.input.resumeFrom", "IsString": True}},
                    {
                        "And": [
                            {"Variable": "$.input.resumeFrom", "IsString": True},
                            {"Not": {"Variable": "$.input.resumeFrom", "StringMatches": "s3://*"}},
                        ]
                    },
                ),
                "Next": "RejectResumeFrom",
            },
        ],
        "Default": "SelectProfile",
    }
    select_profile = {
        "Type": "Choice",
        "Comment": "The first configured profile is the default.",
        "Choices": [
            {"Not": _is_present("$.input.profile"), "Next": _profile_state_name(profiles[0])},
            *(
                {
                    "Variable": "$.input.profile",
                    "StringEquals": profile.name,
                    "Next": _profile_state_name(profile),
                }
                for profile in profiles
            ),
        ],
        "Default": "RejectProfile",
    }
    apply_defaults = {
        "Type": "Pass",
        "Parameters": {
            "input.$": "States.JsonMerge($.defaults, $.input, false)",
            "profile.$": "$.profile",
            "request.$": "$.request",
        },
        "Next": "ProjectKnownFields",
    }
    project_known = {
        "Type": "Pass",
        "Comment": "The input reduced to its known fields, to detect unknown ones.",
        "Parameters": {f"{name}.$": f"$.input.{name}" for name in FIELDS},
        "ResultPath": "$.knownFields",
        "Next": "InspectInput",
    }
    inspect = {
        "Type": "Pass",
        "Comment": "Facts the value checks need that Choice rules cannot compute.",
        "Parameters": {
            # Splitting on every allowed character leaves only the disallowed ones.
            "runNameOtherCharacters.$": (
                f"States.ArrayLength(States.StringSplit($.input.runName, '{RUN_NAME_CHARACTERS}'))"
            ),
            "hyperparametersJson.$": "States.JsonToString($.input.hyperparameters)",
            "instanceCountText.$": "States.Format('{}', $.input.instanceCount)",
            "instanceCountFits.$": (
                "States.ArrayContains($.profile.validInstanceCounts, $.input.instanceCount)"
            ),
            # Defaults come first in JsonMerge's result: equal texts mean no field beyond FIELDS.
            "inputJson.$": "States.JsonToString($.input)",
            "knownFieldsJson.$": "States.JsonToString($.knownFields)",
            "longestJobName.$": "States.Format('{}-{}', $.input.runName, $.profile.maxAttempts)",
        },
        "ResultPath": "$.inspection",
        "Next": "CheckInputValues",
    }
    count_given = {"Not": {"Variable": "$.input.instanceCount", "IsNull": True}}
    check_values = {
        "Type": "Choice",
        "Choices": [
            {
                "Not": {
                    "Variable": "$.inspection.inputJson",
                    "StringEqualsPath": "$.inspection.knownFieldsJson",
                },
                "Next": "RejectUnknownFields",
            },
            {
                "Not": {"Variable": "$.input.runName", "StringMatches": f"{project}-*"},
                "Next": "RejectRunNamePrefix",
            },
            {
                "Or": [
                    {"Variable": "$.inspection.runNameOtherCharacters", "NumericGreaterThan": 0},
                    {"Variable": "$.input.runName", "StringMatches": "*-"},
                ],
                "Next": "RejectRunNameCharacters",
            },
            {
                "Variable": "$.inspection.hyperparametersJson",
                "StringMatches": "[*",
                "Next": "RejectHyperparametersType",
            },
            {
                "Or": [_is_present(f"$.input.hyperparameters.{name}") for name in RESERVED_HYPERPARAMETERS],
                "Next": "RejectReservedHyperparameters",
            },
            {
                "And": [
                    count_given,
                    {
                        "Or": [
                            {"Variable": "$.inspection.instanceCountText", "StringMatches": pattern}
                            for pattern in ("*.*", "*e*", "*E*")
                        ]
                    },
                ],
                "Next": "RejectInstanceCount",
            },
            {
                "And": [
                    count_given,
                    {"Variable": "$.profile.instanceCountRestricted", "BooleanEquals": True},
                    {"Variable": "$.inspection.instanceCountFits", "BooleanEquals": False},
                ],
                "Next": "RejectInstanceCountForProfile",
            },
            {
                "And": [
                    {"Not": {"Variable": "$.input.maxRuntimeHours", "IsNull": True}},
                    {
                        "Variable": "$.input.maxRuntimeHours",
                        "NumericGreaterThanPath": "$.profile.maxRuntimeHoursLimit",
                    },
                ],
                "Next": "RejectMaxRuntimeHoursForProfile",
            },
        ],
        "Default": "ProbeLongestJobName",
    }
    probe = {
        "Type": "Task",
        "Comment": (
            "JSONPath cannot measure runName: ask SageMaker to validate the last attempt's job name "
            "(DescribeTrainingJob validates it before looking the job up)."
        ),
        "Resource": sagemaker_resource(partition, "describeTrainingJob"),
        "Parameters": {"TrainingJobName.$": "$.inspection.longestJobName"},
        "ResultPath": None,
        "Retry": [THROTTLE_RETRY],
        # The probe only advises: any error (a missing job is the usual answer, whatever SageMaker
        # names it) goes on to the check below, which rejects only a constraint violation.
        "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "CheckProbeError"}],
        "Next": "RunLocations",
    }
    check_probe = {
        "Type": "Choice",
        "Comment": "Only a constraint violation rejects the input; 'not found' is the expected answer.",
        "Choices": [
            {
                "Variable": "$.error.Cause",
                "StringMatches": "*failed to satisfy constraint*",
                "Next": "RejectRunNameCharacters",
            }
        ],
        "Default": "RunLocations",
    }
    read_input = {
        "Type": "Pass",
        "Comment": "Keep the input under $.input; its JSON text tells an object from anything else.",
        "Parameters": {"input.$": "$", "inputJson.$": "States.JsonToString($)"},
        "Next": "CheckInputTypes",
    }
    return {
        "ReadInput": read_input,
        "CheckInputTypes": check_types,
        "SelectProfile": select_profile,
        **{_profile_state_name(profile): None for profile in profiles},  # filled by the caller
        "ApplyInputDefaults": apply_defaults,
        "ProjectKnownFields": project_known,
        "InspectInput": inspect,
        "CheckInputValues": check_values,
        "ProbeLongestJobName": probe,
        "CheckProbeError": check_probe,
        **rejections,
    }


def _profile_state_name(profile: Profile) -> str:
    return f"UseProfile-{profile.name}"


def _run_states(sample: PipelineResources, poll_plan: Sequence[PollTier]) -> dict[str, Any]:
    """Per-run fields (job_request's table), applied once per execution."""
    run = "$.input.runName"
    output = output_path(sample, _RUN_PLACEHOLDER).replace(_RUN_PLACEHOLDER, "{}")
    checkpoint = checkpoint_uri(sample, _RUN_PLACEHOLDER).replace(_RUN_PLACEHOLDER, "{}")
    run_fields = {
        # Merged into the profile's own objects (which hold e.g. CheckpointConfig.LocalPath).
        "OutputDataConfig.$": "States.JsonMerge($.request.OutputDataConfig, $.runLocations.output, false)",
        "CheckpointConfig.$": (
            "States.JsonMerge($.request.CheckpointConfig, $.runLocations.checkpoint, false)"
        ),
        "Tags": [
            {"Key": EXECUTION_TAG, "Value.$": "$$.Execution.Id"},
            {"Key": RUN_TAG, "Value.$": run},
        ],
        "HyperParameters.$": "States.JsonMerge($.request.HyperParameters, $.input.hyperparameters, false)",
    }
    keep = {"input.$": "$.input", "profile.$": "$.profile"}
    states: dict[str, Any] = {
        "RunLocations": {
            "Type": "Pass",
            "Comment": "Where the run writes: s3://<artifacts>/<runName>/ and s3://<checkpoints>/<runName>/.",
            "Parameters": {
                "output": {"S3OutputPath.$": _format(output, run)},
                "checkpoint": {"S3Uri.$": _format(checkpoint, run)},
            },
            "ResultPath": "$.runLocations",
            "Next": "PrepareRun",
        },
        "PrepareRun": {
            "Type": "Pass",
            "Comment": "Run name, output and checkpoint URIs, tags, merged hyperparameters.",
            "Parameters": run_fields,
            "ResultPath": "$.runFields",
            "Next": "ApplyRunFields",
        },
        "ApplyRunFields": {
            "Type": "Pass",
            "Parameters": {**keep, "request.$": "States.JsonMerge($.request, $.runFields, false)"},
            "Next": "HasInstanceCount",
        },
        "HasInstanceCount": {
            "Type": "Choice",
            "Choices": [{"Variable": "$.input.instanceCount", "IsNull": True, "Next": "HasMaxRuntime"}],
            "Default": "SetInstanceCount",
        },
        "SetInstanceCount": {
            "Type": "Pass",
            "Comment": "One ResourceConfig.InstanceCount for every preference (preferences lose their own).",
            "InputPath": "$.input.instanceCount",
            "ResultPath": "$.profile.uncountedResourceConfig.InstanceCount",
            "Next": "ReportInstanceCount",
        },
        "ReportInstanceCount": {
            "Type": "Pass",
            "InputPath": "$.input.instanceCount",
            "ResultPath": "$.profile.selectedDefaults.SelectedInstanceCount",
            "Next": "ApplyInstanceCount",
        },
        "ApplyInstanceCount": {
            "Type": "Pass",
            "InputPath": "$.profile.uncountedResourceConfig",
            "ResultPath": "$.request.ResourceConfig",
            "Next": "HasMaxRuntime",
        },
        "HasMaxRuntime": {
            "Type": "Choice",
            "Choices": [{"Variable": "$.input.maxRuntimeHours", "IsNull": True, "Next": "HasResumeFrom"}],
            "Default": "MaxRuntimeInHundredths",
        },
        "MaxRuntimeInHundredths": {
            "Type": "Pass",
            "Comment": "hours * 100, rounded: the decimal shift as text ('<hours>e2'), parsed back.",
            "Parameters": {
                "hundredths.$": (
                    "States.MathAdd(States.StringToJson(States.Format('{}e2', $.input.maxRuntimeHours)), 0)"
                )
            },
            "ResultPath": "$.maxRuntime",
            "Next": "MaxRuntimeInSeconds",
        },
        "MaxRuntimeInSeconds": {
            "Type": "Pass",
            "Comment": "hundredths * 36 = seconds, by MathAdd doubling (32x + 4x).",
            "Parameters": {"seconds.$": _times("$.maxRuntime.hundredths", 36)},
            "ResultPath": "$.maxRuntime",
            "Next": "ApplyMaxRuntime",
        },
        "ApplyMaxRuntime": {
            "Type": "Pass",
            "InputPath": "$.maxRuntime.seconds",
            "ResultPath": "$.request.StoppingCondition.MaxRuntimeInSeconds",
            "Next": "HasResumeFrom",
        },
        "HasResumeFrom": {
            "Type": "Choice",
            "Choices": [{"Variable": "$.input.resumeFrom", "IsNull": True, "Next": "PlanPolling"}],
            "Default": "BuildResumeChannel",
        },
        "BuildResumeChannel": {
            "Type": "Pass",
            "Parameters": {
                "channel": _template(
                    resume_channel(_URI_PLACEHOLDER), {_URI_PLACEHOLDER: "$.input.resumeFrom"}
                )
            },
            "ResultPath": "$.resume",
            "Next": "AppendResumeChannel",
        },
        "AppendResumeChannel": {
            "Type": "Pass",
            "Parameters": {
                "channels.$": (
                    "States.Array(States.ArrayGetItem($.request.InputDataConfig, 0), $.resume.channel)"
                )
            },
            "ResultPath": "$.resume",
            "Next": "ApplyResumeChannel",
        },
        "ApplyResumeChannel": {
            "Type": "Pass",
            "InputPath": "$.resume.channels",
            "ResultPath": "$.request.InputDataConfig",
            "Next": "PlanPolling",
        },
        "PlanPolling": {
            "Type": "Pass",
            "Comment": "Time limit = MaxRuntimeInSeconds + retry deadline + start-up allowance (+ spot wait)",
            "Parameters": {
                **keep,
                "request.$": "$.request",
                "progress": {
                    "attempt": 0,
                    "jobName": "",
                    "elapsedSeconds": 0,
                    "attemptSeconds": 0,
                    "waitSeconds": 0,
                },
                "limits": {
                    "timeLimitSeconds.$": (
                        "States.MathAdd($.request.StoppingCondition.MaxRuntimeInSeconds, "
                        "$.profile.extraTimeSeconds)"
                    )
                },
            },
            "Next": "ChoosePollInterval",
        },
        "ChoosePollInterval": {
            "Type": "Choice",
            "Comment": "Longer executions poll less often, so that none exceeds 25,000 history events.",
            "Choices": [
                {
                    "Variable": "$.limits.timeLimitSeconds",
                    "NumericLessThanEquals": tier.time_limit_seconds,
                    "Next": f"PollEvery{tier.poll_seconds}s",
                }
                for tier in poll_plan
            ],
            "Default": f"PollEvery{poll_plan[-1].poll_seconds}s",
        },
    }
    for tier in poll_plan:
        states[f"PollEvery{tier.poll_seconds}s"] = {
            "Type": "Pass",
            "Result": tier.poll_seconds,
            "ResultPath": "$.limits.pollSeconds",
            "Next": "StartAttempt",
        }
    return states


def _progress(**overrides: str | int) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "attempt.$": "$.progress.attempt",
        "jobName.$": "$.progress.jobName",
        "elapsedSeconds.$": "$.progress.elapsedSeconds",
        "attemptSeconds.$": "$.progress.attemptSeconds",
        "waitSeconds.$": "$.progress.waitSeconds",
    }
    for name, value in overrides.items():
        fields.pop(f"{name}.$")
        fields[f"{name}.$" if isinstance(value, str) else name] = value
    return fields


def _create_states(
    partition: str, role_arn: str, request_shapes: Sequence[tuple[str, ...]], throttled: dict[str, Any]
) -> dict[str, Any]:
    """One CreateTrainingJob task per request shape (set of top-level fields) among the profiles.

    The aws-sdk task takes its request from Parameters; JSONPath fails on a missing path, so each
    task lists exactly the fields of its shape, each taken from the request built so far.
    """
    states: dict[str, Any] = {}
    for index, shape in enumerate(request_shapes):
        states[create_state_name(index)] = {
            "Type": "Task",
            "Resource": sagemaker_resource(partition, "createTrainingJob"),
            "Parameters": {
                **{f"{key}.$": f"$.request.{key}" for key in shape if key != "RoleArn"},
                # The one role of every profile, written as a literal: the local interpreter's ASL lexer
                # takes "RoleArn.$" for the Credentials field (both forms mean the same to AWS).
                "RoleArn": role_arn,
            },
            "ResultPath": None,
            "Retry": [throttled],
            "Catch": [
                {
                    "ErrorEquals": ["SageMaker.ResourceLimitExceededException"],
                    "ResultPath": "$.error",
                    "Next": "DescribeQuota",
                },
                {
                    "ErrorEquals": ["SageMaker.ValidationException"],
                    "ResultPath": "$.error",
                    "Next": "DescribeRejectedRequest",
                },
                {
                    "ErrorEquals": ["SageMaker.ResourceInUseException"],
                    "ResultPath": "$.error",
                    "Next": "DescribeRunNameInUse",
                },
            ],
            "Next": "PollSoon",
        }
    if len(request_shapes) > 1:
        states["ChooseCreateCall"] = {
            "Type": "Choice",
            "Choices": [
                {
                    "Variable": "$.profile.requestShape",
                    "NumericEquals": index,
                    "Next": create_state_name(index),
                }
                for index in range(1, len(request_shapes))
            ],
            "Default": create_state_name(0),
        }
    return states


def create_state_name(index: int) -> str:
    return "CreateTrainingJob" if index == 0 else f"CreateTrainingJob{index + 1}"


def request_shape(profile: Profile, resources: PipelineResources) -> tuple[str, ...]:
    return tuple(sorted({*base_request(profile, resources), *PER_RUN_FIELDS}))


# Top-level request fields every execution sets (job_request's per-run table).
PER_RUN_FIELDS = ("TrainingJobName", "OutputDataConfig", "CheckpointConfig", "Tags", "HyperParameters")


def _attempt_states(
    partition: str, role_arn: str, request_shapes: Sequence[tuple[str, ...]]
) -> dict[str, Any]:
    create_entry = "ChooseCreateCall" if len(request_shapes) > 1 else create_state_name(0)
    next_attempt = "States.MathAdd($.progress.attempt, 1)"
    throttled = THROTTLE_RETRY
    attempt_index = "States.MathAdd($.progress.attempt, -1)"
    startup = [
        {"Variable": "$.job.secondaryStatus", "StringEquals": status} for status in STARTUP_SECONDARY_STATUSES
    ]
    return {
        **_create_states(partition, role_arn, request_shapes, throttled),
        "StartAttempt": {
            "Type": "Pass",
            "Comment": "Attempt N runs job <runName>-N; every attempt shares the run's checkpoint URI.",
            "Parameters": _progress(
                attempt=next_attempt,
                jobName=f"States.Format('{{}}-{{}}', $.input.runName, {next_attempt})",
                attemptSeconds=0,
            ),
            "ResultPath": "$.progress",
            "Next": "NameJob",
        },
        "NameJob": {
            "Type": "Pass",
            "InputPath": "$.progress.jobName",
            "ResultPath": "$.request.TrainingJobName",
            "Next": create_entry,
        },
        "DescribeQuota": {
            "Type": "Pass",
            "Parameters": {
                "cause.$": _format(
                    "SageMaker refused job {}: a service quota is exhausted ({}). Request a higher quota "
                    "in Service Quotas or wait for running jobs to end.",
                    "$.progress.jobName",
                    "$.error.Cause",
                )
            },
            "Next": "QuotaExceeded",
        },
        "QuotaExceeded": {"Type": "Fail", "Error": ERROR_QUOTA_EXCEEDED, "CausePath": "$.cause"},
        "DescribeRejectedRequest": {
            "Type": "Choice",
            "Comment": "SageMaker's validation names its own field; say which input field that is.",
            "Choices": [
                {"Variable": "$.error.Cause", "StringMatches": pattern, "Next": state}
                for pattern, state in (
                    ("*trainingJobName*", "RejectedRunName"),
                    ("*yperParameters*", "RejectedHyperparameters"),
                    ("*nstanceCount*", "RejectedInstanceCount"),
                    ("*axRuntimeInSeconds*", "RejectedMaxRuntimeHours"),
                    ("*3Uri*", "RejectedResumeFrom"),
                )
            ],
            "Default": "RejectedInput",
        },
        **{
            state: {
                "Type": "Pass",
                "Parameters": {
                    "cause.$": _format(f"{field} was rejected by SageMaker: {{}}", "$.error.Cause")
                },
                "Next": "InvalidInput",
            }
            for state, field in (
                ("RejectedRunName", "runName"),
                ("RejectedHyperparameters", "hyperparameters"),
                ("RejectedInstanceCount", "instanceCount"),
                ("RejectedMaxRuntimeHours", "maxRuntimeHours"),
                ("RejectedResumeFrom", "resumeFrom"),
                ("RejectedInput", "The input"),
            )
        },
        "DescribeRunNameInUse": {
            "Type": "Pass",
            "Parameters": {
                "cause.$": _format(
                    "runName {} is already used by training job {}; choose another runName.",
                    "$.input.runName",
                    "$.progress.jobName",
                )
            },
            "Next": "InvalidInput",
        },
        "PollSoon": {
            "Type": "Pass",
            "Parameters": _progress(
                elapsedSeconds=f"States.MathAdd($.progress.elapsedSeconds, {STARTUP_POLL_SECONDS})",
                attemptSeconds=f"States.MathAdd($.progress.attemptSeconds, {STARTUP_POLL_SECONDS})",
                waitSeconds=STARTUP_POLL_SECONDS,
            ),
            "ResultPath": "$.progress",
            "Next": "WaitForJob",
        },
        "PollLater": {
            "Type": "Pass",
            "Parameters": _progress(
                elapsedSeconds="States.MathAdd($.progress.elapsedSeconds, $.limits.pollSeconds)",
                attemptSeconds="States.MathAdd($.progress.attemptSeconds, $.limits.pollSeconds)",
                waitSeconds="$.limits.pollSeconds",
            ),
            "ResultPath": "$.progress",
            "Next": "WaitForJob",
        },
        "WaitForJob": {
            "Type": "Wait",
            "SecondsPath": "$.progress.waitSeconds",
            "Next": "DescribeTrainingJob",
        },
        "DescribeTrainingJob": {
            "Type": "Task",
            "Resource": sagemaker_resource(partition, "describeTrainingJob"),
            "Parameters": {"TrainingJobName.$": "$.progress.jobName"},
            "ResultSelector": {"status.$": "$.TrainingJobStatus", "secondaryStatus.$": "$.SecondaryStatus"},
            "ResultPath": "$.job",
            "Retry": [throttled],
            "Next": "CheckJobStatus",
        },
        "CheckJobStatus": {
            "Type": "Choice",
            "Choices": [
                {
                    "Or": [
                        {"Variable": "$.job.status", "StringEquals": status}
                        for status in ("Completed", "Failed", "Stopped")
                    ],
                    "Next": "DescribeFinishedJob",
                },
                {
                    "Variable": "$.progress.elapsedSeconds",
                    "NumericGreaterThanPath": "$.limits.timeLimitSeconds",
                    "Next": "StopOverdueJob",
                },
                {
                    "And": [
                        {
                            "Variable": "$.progress.attemptSeconds",
                            "NumericLessThan": STARTUP_POLL_WINDOW_SECONDS,
                        },
                        {"Or": startup},
                    ],
                    "Next": "PollSoon",
                },
            ],
            "Default": "PollLater",
        },
        "StopOverdueJob": {
            "Type": "Task",
            "Comment": "The job outlived MaxRuntimeInSeconds and every allowance: stop it.",
            "Resource": sagemaker_resource(partition, "stopTrainingJob"),
            "Parameters": {"TrainingJobName.$": "$.progress.jobName"},
            "ResultPath": None,
            "Retry": [throttled],
            "Next": "DescribeOverdueStop",
        },
        "DescribeOverdueStop": {
            "Type": "Pass",
            "Parameters": {
                "cause.$": _format(
                    "Training job {} was stopped by the pipeline after {} seconds, its time limit "
                    "(maxRuntimeHours + retry deadline + start-up allowance).",
                    "$.progress.jobName",
                    "$.limits.timeLimitSeconds",
                )
            },
            "Next": "TrainingStopped",
        },
        "DescribeFinishedJob": {
            "Type": "Task",
            "Resource": sagemaker_resource(partition, "describeTrainingJob"),
            "Parameters": {"TrainingJobName.$": "$.progress.jobName"},
            "ResultPath": "$.finished",
            "Retry": [throttled],
            "Next": "ClassifyOutcome",
        },
        "ClassifyOutcome": {
            "Type": "Choice",
            "Choices": [
                {
                    "Variable": "$.finished.TrainingJobStatus",
                    "StringEquals": "Completed",
                    "Next": "SelectedResources",
                },
                {
                    "Variable": "$.finished.TrainingJobStatus",
                    "StringEquals": "Stopped",
                    "Next": "DescribeStop",
                },
                {
                    "And": [
                        _is_present("$.finished.FailureReason"),
                        {"Variable": "$.finished.FailureReason", "StringMatches": "CapacityError*"},
                    ],
                    "Next": "CheckAttemptsLeft",
                },
                {"Not": _is_present("$.finished.FailureReason"), "Next": "DescribeFailureWithoutReason"},
            ],
            "Default": "DescribeFailure",
        },
        "DescribeStop": {
            "Type": "Pass",
            "Parameters": {
                "cause.$": _format(
                    "Training job {} was stopped ({}).", "$.progress.jobName", "$.finished.SecondaryStatus"
                )
            },
            "Next": "TrainingStopped",
        },
        "TrainingStopped": {"Type": "Fail", "Error": ERROR_TRAINING_STOPPED, "CausePath": "$.cause"},
        "DescribeFailure": {
            "Type": "Pass",
            "Parameters": {
                "cause.$": _format(
                    "Training job {} failed: {}", "$.progress.jobName", "$.finished.FailureReason"
                )
            },
            "Next": "TrainingFailed",
        },
        "DescribeFailureWithoutReason": {
            "Type": "Pass",
            "Parameters": {
                "cause.$": _format("Training job {} failed without a FailureReason.", "$.progress.jobName")
            },
            "Next": "TrainingFailed",
        },
        "TrainingFailed": {"Type": "Fail", "Error": ERROR_TRAINING_FAILED, "CausePath": "$.cause"},
        "CheckAttemptsLeft": {
            "Type": "Choice",
            "Choices": [
                {
                    "Variable": "$.progress.attempt",
                    "NumericGreaterThanEqualsPath": "$.profile.maxAttempts",
                    "Next": "DescribeAttemptsSpent",
                }
            ],
            "Default": "ComputeBackoff",
        },
        "ComputeBackoff": {
            "Type": "Pass",
            "Comment": "Exponential backoff from the profile's schedule plus up to 10% random jitter.",
            "Parameters": {
                "seconds.$": (
                    f"States.MathAdd(States.ArrayGetItem($.profile.backoffSeconds, {attempt_index}), "
                    f"States.MathRandom(0, States.ArrayGetItem($.profile.jitterSeconds, {attempt_index})))"
                )
            },
            "ResultPath": "$.backoff",
            "Next": "ChargeBackoff",
        },
        "ChargeBackoff": {
            "Type": "Pass",
            "Parameters": _progress(
                elapsedSeconds="States.MathAdd($.progress.elapsedSeconds, $.backoff.seconds)",
                waitSeconds="$.backoff.seconds",
            ),
            "ResultPath": "$.progress",
            "Next": "CheckDeadline",
        },
        "CheckDeadline": {
            "Type": "Choice",
            "Choices": [
                {
                    "Variable": "$.progress.elapsedSeconds",
                    "NumericGreaterThanPath": "$.profile.deadlineSeconds",
                    "Next": "DescribeDeadlinePassed",
                }
            ],
            "Default": "WaitBeforeRetry",
        },
        "WaitBeforeRetry": {"Type": "Wait", "SecondsPath": "$.progress.waitSeconds", "Next": "StartAttempt"},
        "DescribeAttemptsSpent": {
            "Type": "Pass",
            "Parameters": {
                "cause.$": _format(
                    "No capacity after {} attempts (profile {} allows {}); last job {}: {}",
                    "$.progress.attempt",
                    "$.profile.name",
                    "$.profile.maxAttempts",
                    "$.progress.jobName",
                    "$.finished.FailureReason",
                )
            },
            "Next": "CapacityExhausted",
        },
        "DescribeDeadlinePassed": {
            "Type": "Pass",
            "Parameters": {
                "cause.$": _format(
                    "No capacity within the retry deadline of {} seconds (profile {}) after {} attempts; "
                    "last job {}: {}",
                    "$.profile.deadlineSeconds",
                    "$.profile.name",
                    "$.progress.attempt",
                    "$.progress.jobName",
                    "$.finished.FailureReason",
                )
            },
            "Next": "CapacityExhausted",
        },
        "CapacityExhausted": {"Type": "Fail", "Error": ERROR_CAPACITY_EXHAUSTED, "CausePath": "$.cause"},
        "SelectedResources": {
            "Type": "Pass",
            "Comment": "SelectedInstanceType/Count with InstancePreferences; the profile's type on spot.",
            "Parameters": {
                "value.$": "States.JsonMerge($.profile.selectedDefaults, $.finished.ResourceConfig, false)"
            },
            "ResultPath": "$.selected",
            "Next": "Result",
        },
        "Result": {
            "Type": "Pass",
            "Parameters": {
                "trainingJobName.$": "$.finished.TrainingJobName",
                "instanceType.$": "$.selected.value.SelectedInstanceType",
                "instanceCount.$": "$.selected.value.SelectedInstanceCount",
                "modelArtifacts.$": "$.finished.ModelArtifacts.S3ModelArtifacts",
                "checkpointUri.$": "$.request.CheckpointConfig.S3Uri",
                "attempts.$": "$.progress.attempt",
            },
            "End": True,
        },
    }


def build_definition(
    profiles: Sequence[Profile], *, project: str, partition: str, resources: PipelineResources
) -> dict[str, Any]:
    """The ASL document for `resources` given with placeholders (see with_placeholders)."""
    if not profiles:
        raise ValueError("the pipeline needs at least one profile under profiles: in the config")
    tiers = poll_tiers(max(profile.retry.max_attempts for profile in profiles))
    states = _input_states(profiles, project, partition)
    for profile in profiles:
        states[_profile_state_name(profile)] = _profile_state(profile, resources, project)
    states.update(_run_states(resources, tiers))
    shapes = sorted({request_shape(profile, resources) for profile in profiles}, key=len, reverse=True)
    for profile in profiles:
        states[_profile_state_name(profile)]["Parameters"]["profile"]["requestShape"] = shapes.index(
            request_shape(profile, resources)
        )
    states.update(_attempt_states(partition, resources.role_arn, shapes))
    return {
        "Comment": (
            "trainstack training pipeline: validate input, create the job, poll it, retry on capacity "
            "errors with backoff. Errors: InvalidInput, CapacityExhausted, QuotaExceeded, "
            "TrainingFailed, TrainingStopped."
        ),
        "QueryLanguage": "JSONPath",
        "StartAt": "ReadInput",
        "TimeoutSeconds": execution_timeout_seconds(profiles),
        "States": states,
    }


def execution_timeout_seconds(profiles: Sequence[Profile]) -> int:
    """The state machine's own limit: above every profile's time limit at the 28-day maximum runtime."""
    return max(time_limit_seconds(profile, MAX_RUNTIME_HOURS_LIMIT * 3600) for profile in profiles) + 3600


def definition_json(definition: dict[str, Any]) -> str:
    return json.dumps(definition, separators=(",", ":"))
