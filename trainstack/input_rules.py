"""The rules an execution input must meet, as data: the CLI (trainstack.execution_input) and the state
machine (stacks/pipeline/pipeline_input_rules.py, one JSONata condition per rule id) check the same rules
in the same order and refuse with the same sentence.

    {"profile": str, "runName": str, "hyperparameters": {str: str}, "instanceCount": int,
     "maxRuntimeHours": number, "resumeFrom": "s3://...",
     "code": {"digest": <sha256, 64 hex>, "entry": <path>}}  (every field optional)

`code` runs the team's own code (trainstack.team_code) instead of the image's entry point: the bundle
`s3://<artifact bucket>/code/<namespace>/<digest>/sourcedir.tar.gz`, its `entry` launched as the profile's
strategy launches train.py.

In queue mode (`queue.enabled`) two more optional fields exist: "priority" (0-9999, Batch's
schedulingPriority; only with fair shares) and "share" (one of queue.shares; default: the first).
Without queue mode they are unknown fields, so the input contract and the machine stay as they were.

INPUT_RULES lists the rules in the order they are checked: the field, a short rule id and the
one-sentence cause an execution fails with (error `InvalidInput`); message_context() fills the causes'
{placeholders} from the config. PROFILE_RULES follow; they depend on the chosen profile.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from trainstack.hyperparameter_reading import (
    COUNTED_HYPERPARAMETERS,
    MAX_COUNT,
    is_count,
    is_spelled_as_checked,
)
from trainstack.launch_flags import RESERVED_HYPERPARAMETERS
from trainstack.planning.forecast import INTERVAL_HYPERPARAMETER
from trainstack.planning.setups import instance_count_problem
from trainstack.profiles import MAX_RUNTIME_HOURS_LIMIT, Profile
from trainstack.queue_settings import QueueSettings
from trainstack.run_names import RUN_NAME_MAX_LENGTH
from trainstack.team_code import ENTRY_PATTERN, code_key_prefix, is_digest, is_entry
from trainstack.teams import RunLimits


class RunConfig(Protocol):
    """What the input rules read of the config: one pipeline's slice (trainstack.pipeline_runs.PipelineRuns:
    with teams, the team's namespace, profiles, share and caps). Settings has it too, for a config without
    teams."""

    @property
    def project(self) -> str: ...

    @property
    def profiles(self) -> Sequence[Profile]: ...

    @property
    def queue(self) -> QueueSettings: ...

    @property
    def limits(self) -> RunLimits: ...

    @property
    def region(self) -> str | None: ...  # where the runs are priced (trainstack.prices)

    def profile(self, name: str) -> Profile: ...


FIELDS = ("profile", "runName", "hyperparameters", "instanceCount", "maxRuntimeHours", "resumeFrom", "code")
CODE_MEMBERS = ("digest", "entry")
QUEUE_FIELDS = ("priority", "share")
MIN_RUNTIME_HOURS = 0.01
# Both matched whole (re.fullmatch), as the pipeline's JSONata reads them (JavaScript's `$` matches no
# final newline).
RUN_NAME_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9])*$"
S3_URI_PATTERN = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$"
# A location (after its `s3://`) with a `.` or `..` segment or an empty one (`//`) is not normalized: how
# SageMaker, S3 clients and Lustre resolve `<own run>/../<another team's run>` is not documented, so no prefix
# comparison can vouch for it. The input rules and the inner machines' request check refuse it.
S3_SCHEME = r"^s3://"
NOT_NORMALIZED = r"(^|/)\.\.?(/|$)|//"
HYPERPARAMETER_NAME_MAX_LENGTH = 256
# The execution's ARN becomes the value of the jobs' trainstack:execution tag, and SageMaker tag values
# must match [\p{L}\p{Z}\p{N}_.:/=+\-@]* (SageMaker API reference, Tag). Step Functions also allows
# ! ' ( ) and other symbols in execution names, so names are kept to characters safe in both (ASCII:
# JSONata's regular expressions have no \p{L}).
UNSAFE_EXECUTION_NAME_CHARACTER = r"[^A-Za-z0-9_.=+@-]"
EXECUTION_NAME_MESSAGE = (
    "The execution name may hold only letters A-Z and a-z, digits and _ . = + - @ (the pipeline tags its "
    "training jobs with the execution's ARN); start the execution under another name."
)
HYPERPARAMETER_VALUE_MAX_LENGTH = 2500


@dataclass(frozen=True)
class InputRule:
    field: str  # input field, or "" for the input as a whole
    rule: str  # short id of the check, e.g. "integer>=1"
    message: str  # the cause; {profiles}, {prefix}, {fields} ... are filled from the config
    accepts: Callable[[Any, RunConfig], bool]  # called only when the field is present
    queue_only: bool = False  # checked only in queue mode (queue.enabled)


def _is_whole_number(value: Any) -> bool:
    """JSON has one number type: 2 and 2.0 are the same whole number (as in JSONata)."""
    return _is_number(value) and float(value).is_integer()


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def input_fields(settings: RunConfig) -> tuple[str, ...]:
    """The fields an execution input may hold under this config."""
    return FIELDS + QUEUE_FIELDS if settings.queue.enabled else FIELDS


def _hyperparameters(check: Callable[[str, Any], bool]) -> Callable[[Any, RunConfig], bool]:
    return lambda value, _: all(check(name, item) for name, item in value.items())


def _is_job_name_part(value: str) -> bool:
    return len(value) <= RUN_NAME_MAX_LENGTH and re.fullmatch(RUN_NAME_PATTERN, value) is not None


# A profile's `checkpoint_interval: auto` is resolved at synth, never per run.
_AUTO_NOTE = {INTERVAL_HYPERPARAMETER: "; 'auto' is a profile setting, resolved when the app is synthesized"}


def _count_rule(name: str) -> InputRule:
    return InputRule(
        "hyperparameters",
        f"whole-number:{name}",
        f"hyperparameters.{name} must be a whole number of {COUNTED_HYPERPARAMETERS[name]} from 1 to "
        f'{MAX_COUNT} in plain digits, such as "1000" (no sign, spaces, leading zeros, decimal point or '
        f"exponent{_AUTO_NOTE.get(name, '')}).",
        _hyperparameters(lambda key, item: key != name or is_count(item)),
    )


def _resumable(settings: RunConfig, key: str) -> bool:
    """The key is in the namespace's runs, or in the pre-teams runs a team inherited (`inherited_prefixes`
    of trainstack.pipeline_runs.PipelineRuns, less the other teams' `foreign_prefixes`)."""
    inherited = getattr(settings, "inherited_prefixes", ())
    foreign = getattr(settings, "foreign_prefixes", ())
    return key.startswith(f"{settings.project}-") or (
        key.startswith(tuple(inherited)) and not key.startswith(tuple(foreign))
    )


def _key_of(uri: str) -> str:
    """The object key (prefix) of s3://bucket/key."""
    return uri.split("/", 3)[3] if uri.count("/") >= 3 else ""


def _within_sizes(name: str, value: str) -> bool:
    return 0 < len(name) <= HYPERPARAMETER_NAME_MAX_LENGTH and len(value) <= HYPERPARAMETER_VALUE_MAX_LENGTH


INPUT_RULES: tuple[InputRule, ...] = (
    InputRule(
        "",
        "object",
        "The input must be a JSON object with the optional fields {fields}.",
        lambda value, _: isinstance(value, Mapping),
    ),
    InputRule(
        "",
        "known-fields",
        "The input has unknown field(s) {unknown}; allowed fields: {fields}.",
        lambda value, settings: set(value) <= set(input_fields(settings)),
    ),
    InputRule(
        "profile",
        "string",
        "profile must be a string naming one of: {profiles}.",
        lambda value, _: isinstance(value, str),
    ),
    InputRule(
        "profile",
        "one-of-profiles",
        "profile must be one of: {profiles}.",
        lambda value, settings: value in {profile.name for profile in settings.profiles},
    ),
    InputRule(
        "runName",
        "string",
        "runName must be a string starting with '{prefix}-'.",
        lambda value, _: isinstance(value, str),
    ),
    InputRule(
        "runName",
        "prefix",
        "runName must start with '{prefix}-' (the pipeline may only create jobs named so).",
        lambda value, settings: value.startswith(f"{settings.project}-"),
    ),
    InputRule(
        "runName",
        "job-name",
        "runName may hold only letters, digits and single hyphens "
        f"(pattern {RUN_NAME_PATTERN}) and at most {RUN_NAME_MAX_LENGTH} characters.",
        lambda value, _: _is_job_name_part(value),
    ),
    InputRule(
        "hyperparameters",
        "object",
        "hyperparameters must be a JSON object of string names to string values.",
        lambda value, _: isinstance(value, Mapping),
    ),
    InputRule(
        "hyperparameters",
        "string-values",
        'hyperparameters values must be strings, e.g. {{"learning_rate": "3e-4"}}.',
        _hyperparameters(lambda _, item: isinstance(item, str)),
    ),
    InputRule(
        "hyperparameters",
        "not-reserved",
        "hyperparameters may not set {reserved}: the profile's strategy sets them.",
        _hyperparameters(lambda name, _: name not in RESERVED_HYPERPARAMETERS),
    ),
    InputRule(
        "hyperparameters",
        "flag-spelling",
        f"hyperparameters names may not write {', '.join(COUNTED_HYPERPARAMETERS)} or the reserved names "
        "with '-' for '_' or with '=' in them: train.py reads max-steps and max_steps=N as max_steps.",
        _hyperparameters(lambda name, _: is_spelled_as_checked(name)),
    ),
    InputRule(
        "hyperparameters",
        "sizes",
        f"hyperparameters names may have at most {HYPERPARAMETER_NAME_MAX_LENGTH} characters "
        f"and values at most {HYPERPARAMETER_VALUE_MAX_LENGTH}.",
        _hyperparameters(_within_sizes),
    ),
    *(_count_rule(name) for name in COUNTED_HYPERPARAMETERS),
    InputRule(
        "instanceCount",
        "integer>=1",
        "instanceCount must be a whole number from 1 to {max_instance_count}.",
        lambda value, settings: _is_whole_number(value) and 1 <= value <= settings.limits.max_instance_count,
    ),
    InputRule(
        "maxRuntimeHours",
        "number-in-range",
        f"maxRuntimeHours must be a number from {MIN_RUNTIME_HOURS} to {{max_runtime_hours}}.",
        lambda value, settings: (
            _is_number(value) and MIN_RUNTIME_HOURS <= value <= settings.limits.max_runtime_hours
        ),
    ),
    InputRule(
        "resumeFrom",
        "s3-uri",
        "resumeFrom must be an S3 URI such as s3://bucket/run-name/.",
        lambda value, _: isinstance(value, str) and re.fullmatch(S3_URI_PATTERN, value) is not None,
    ),
    InputRule(
        "resumeFrom",
        "normalized",
        "resumeFrom must be a normalized S3 URI, with no . or .. segment and no //.",
        lambda value, _: re.search(NOT_NORMALIZED, re.sub(S3_SCHEME, "", str(value))) is None,
    ),
    # A run may resume only from its own namespace's runs. The state machine also checks the bucket (one of
    # the deployment's checkpoint and artifact buckets, whose names the CLI does not know), and the
    # SageMaker role of the namespace can read nothing else.
    InputRule(
        "resumeFrom",
        "own-runs",
        "resumeFrom must lie in a run of {prefix}: s3://<checkpoint or artifact bucket>/{prefix}-<run>/...",
        lambda value, settings: _resumable(settings, _key_of(value)),
    ),
    InputRule(
        "code",
        "object",
        'code must be a JSON object {{"digest": <sha256 of the bundle>, "entry": <its entry point>}} '
        "with these two members only (trainstack start --code DIR --entry FILE makes one).",
        lambda value, _: isinstance(value, Mapping) and sorted(value) == sorted(CODE_MEMBERS),
    ),
    InputRule(
        "code",
        "digest",
        "code.digest must be 64 lowercase hex digits, the sha256 of a bundle in the team's code prefix "
        "s3://<artifact bucket>/{code_prefix}.",
        lambda value, _: is_digest(value["digest"]),
    ),
    InputRule(
        "code",
        "entry",
        f"code.entry must be a relative path to a .py or .sh file of the bundle (pattern {ENTRY_PATTERN}), "
        "with no . or .. segment and no //.",
        lambda value, _: is_entry(value["entry"]) and re.search(NOT_NORMALIZED, value["entry"]) is None,
    ),
    InputRule(
        "instanceCount",
        "within-queue",
        "instanceCount must be at most {max_instances}, the queue's capacity (queue.max_instances).",
        lambda value, settings: value <= settings.queue.max_instances,
        queue_only=True,
    ),
    InputRule(
        "priority",
        "integer-0-9999",
        "priority must be a whole number from 0 to {max_priority} (higher runs first).",
        lambda value, settings: _is_whole_number(value) and 0 <= value <= settings.limits.max_priority,
        queue_only=True,
    ),
    InputRule(
        "priority",
        "fair-share-queue",
        "priority orders jobs only in a queue with fair shares (queue.shares in the config).",
        lambda _, settings: bool(settings.queue.shares),
        queue_only=True,
    ),
    InputRule(
        "share",
        "one-of-shares",
        "share must be one of the queue's shares: {shares}.",
        lambda value, settings: value in settings.queue.shares,
        queue_only=True,
    ),
)


@dataclass(frozen=True)
class ProfileRule:
    field: str
    rule: str
    problem: Callable[[Any, Profile], str | None]  # the cause, or None when the value fits the profile


def _count_problem(count: int, profile: Profile) -> str | None:
    problem = instance_count_problem(profile, count)
    return f"instanceCount {count} does not fit profile {profile.name}: {problem}." if problem else None


def _spot_wait_problem(hours: float, profile: Profile) -> str | None:
    """Managed spot: MaxWaitTimeInSeconds (the profile's max_wait_hours) must cover the runtime."""
    if profile.managed_spot and hours > profile.max_wait_hours:
        return f"maxRuntimeHours must be at most {profile.max_wait_hours:g} for profile {profile.name}."
    return None


PROFILE_RULES: tuple[ProfileRule, ...] = (
    ProfileRule("instanceCount", "fits-profile", _count_problem),
    ProfileRule("maxRuntimeHours", "within-spot-wait", _spot_wait_problem),
)


def input_rules(settings: RunConfig) -> tuple[InputRule, ...]:
    """INPUT_RULES that apply under this config (the queue's rules only in queue mode)."""
    return tuple(rule for rule in INPUT_RULES if settings.queue.enabled or not rule.queue_only)


def message_context(settings: RunConfig, unknown: str) -> dict[str, str]:
    """What the {placeholders} of INPUT_RULES' messages stand for; `unknown` lists the unknown fields."""
    return {
        "fields": ", ".join(input_fields(settings)),
        "profiles": ", ".join(profile.name for profile in settings.profiles),
        "prefix": settings.project,
        "code_prefix": code_key_prefix(settings.project),
        "reserved": ", ".join(RESERVED_HYPERPARAMETERS),
        "unknown": unknown,
        "max_instances": str(settings.queue.max_instances),
        "max_instance_count": str(settings.limits.max_instance_count),
        "max_runtime_hours": f"{settings.limits.max_runtime_hours:g}"
        + (" (28 days)" if settings.limits.max_runtime_hours == MAX_RUNTIME_HOURS_LIMIT else ""),
        "max_priority": str(settings.limits.max_priority),
        "shares": ", ".join(settings.queue.shares) or "none (the queue has no fair shares)",
    }
