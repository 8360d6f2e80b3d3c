"""The execution input rules of trainstack.input_rules as one JSONata expression, and the profile table.

Each rule of INPUT_RULES and PROFILE_RULES has its condition here, keyed by (field, rule id); the causes
are the rules' own messages, so the state machine and the CLI reject the same input with the same
sentence. The expression evaluates the rules in the same order as the CLI (whole input, then each
field, then the chosen profile's rules) and yields {"problem": cause or null, "input": the input with
its defaults, "profile": the chosen profile's entry of the profile table}.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stacks.pipeline import cost_cap_states
from stacks.pipeline.jsonata_text import literal
from stacks.pipeline.state_machine_facts import extra_time_seconds, placeholder
from trainstack.checkpoint_requests import checkpoint_prefix, direct_resume_prefixes
from trainstack.express_buckets import EXPRESS_STORE
from trainstack.hyperparameter_reading import (
    CHECKED_FLAGS,
    CHECKED_NAMES,
    COUNT_PATTERN,
    COUNTED_HYPERPARAMETERS,
)
from trainstack.input_rules import (
    EXECUTION_NAME_MESSAGE,
    HYPERPARAMETER_NAME_MAX_LENGTH,
    HYPERPARAMETER_VALUE_MAX_LENGTH,
    MIN_RUNTIME_HOURS,
    NOT_NORMALIZED,
    PROFILE_RULES,
    RUN_NAME_PATTERN,
    S3_SCHEME,
    S3_URI_PATTERN,
    UNSAFE_EXECUTION_NAME_CHARACTER,
    RunConfig,
    input_fields,
    input_rules,
    message_context,
)
from trainstack.job_request import PipelineResources, base_request, instance_preferences
from trainstack.jsonata_regex import regex_literal
from trainstack.launch_flags import RESERVED_HYPERPARAMETERS
from trainstack.planning.setups import instance_count_problem
from trainstack.profiles import MAX_RUNTIME_HOURS_LIMIT, Profile
from trainstack.retry_policies import Backoff
from trainstack.run_names import RUN_NAME_MAX_LENGTH
from trainstack.team_code import DIGEST_PATTERN, ENTRY_PATTERN
from trainstack.teams import MAX_INSTANCE_COUNT

# Fraction of each capacity backoff added at random (jitter).
JITTER_FRACTION = 0.1


def _conditions(settings: RunConfig) -> dict[tuple[str, str], str]:
    """What each rule accepts; `$v` is the field's value, `$p` the chosen profile's table entry."""
    names = literal([profile.name for profile in settings.profiles])
    prefix = f"{settings.project}-"
    limits = settings.limits
    # s3://<checkpoint or artifact bucket>/<namespace>-, and the namespace's s3-express directory bucket
    # when its profiles use one: the buckets' names are filled in at deploy time.
    buckets = ["CheckpointBucket", "ArtifactBucket"]
    if any(profile.checkpoint_store == EXPRESS_STORE for profile in settings.profiles):
        buckets.append("ExpressCheckpointBucket")
    run_prefixes = literal([f"s3://{placeholder(bucket)}/{prefix}" for bucket in buckets])
    return {
        ("", "object"): '$type($raw) = "object"',
        ("", "known-fields"): "$count($unknown) = 0",
        ("profile", "string"): '$type($v) = "string"',
        ("profile", "one-of-profiles"): f"$v in {names}",
        ("runName", "string"): '$type($v) = "string"',
        ("runName", "prefix"): f"$substring($v, 0, {len(prefix)}) = {literal(prefix)}",
        (
            "runName",
            "job-name",
        ): f"$length($v) <= {RUN_NAME_MAX_LENGTH} and $contains($v, {regex_literal(RUN_NAME_PATTERN)})",
        ("hyperparameters", "object"): '$type($v) = "object"',
        ("hyperparameters", "string-values"): (
            '$count($filter($keys($v), function($k) { $type($lookup($v, $k)) != "string" })) = 0'
        ),
        ("hyperparameters", "not-reserved"): (
            "$count($filter($keys($v), function($k) "
            f"{{ $k in {literal(list(RESERVED_HYPERPARAMETERS))} }})) = 0"
        ),
        ("hyperparameters", "flag-spelling"): (
            "$count($filter($keys($v), function($k) { "
            f'$replace($substringBefore($k, "="), "_", "-") in {literal(list(CHECKED_FLAGS))} '
            f"and $not($k in {literal(list(CHECKED_NAMES))}) }})) = 0"
        ),
        ("hyperparameters", "sizes"): (
            "$count($filter($keys($v), function($k) { $length($k) = 0 "
            f"or $length($k) > {HYPERPARAMETER_NAME_MAX_LENGTH} "
            f"or $length($lookup($v, $k)) > {HYPERPARAMETER_VALUE_MAX_LENGTH} }})) = 0"
        ),
        **{("hyperparameters", f"whole-number:{name}"): _is_count(name) for name in COUNTED_HYPERPARAMETERS},
        ("instanceCount", "integer>=1"): (
            f'$type($v) = "number" ? ($v = $floor($v) and $v >= 1 '
            f"and $v <= {limits.max_instance_count}) : false"
        ),
        ("maxRuntimeHours", "number-in-range"): (
            f'$type($v) = "number" ? ($v >= {MIN_RUNTIME_HOURS} and $v <= {limits.max_runtime_hours}) : false'
        ),
        (
            "resumeFrom",
            "s3-uri",
        ): f'$type($v) = "string" ? $contains($v, {regex_literal(S3_URI_PATTERN)}) : false',
        ("resumeFrom", "normalized"): (
            f'$not($contains($replace($v, {regex_literal(S3_SCHEME)}, ""), {regex_literal(NOT_NORMALIZED)}))'
        ),
        ("resumeFrom", "own-runs"): _under(run_prefixes) + _inherited_runs(settings),
        ("code", "object"): (
            '$type($v) = "object" and $count($keys($v)) = 2 and "digest" in $keys($v) '
            'and "entry" in $keys($v)'
        ),
        (
            "code",
            "digest",
        ): f'$type($v.digest) = "string" and $contains($v.digest, {regex_literal(DIGEST_PATTERN)})',
        ("code", "entry"): (
            f'$type($v.entry) = "string" and $contains($v.entry, {regex_literal(ENTRY_PATTERN)}) '
            f"and $not($contains($v.entry, {regex_literal(NOT_NORMALIZED)}))"
        ),
        ("instanceCount", "within-queue"): f"$v <= {settings.queue.max_instances}",
        ("priority", "integer-0-9999"): (
            f'$type($v) = "number" ? ($v = $floor($v) and $v >= 0 and $v <= {limits.max_priority}) : false'
        ),
        ("priority", "fair-share-queue"): literal(bool(settings.queue.shares)),
        ("share", "one-of-shares"): f"$v in {literal(list(settings.queue.shares))}",
        ("instanceCount", "fits-profile"): "$exists($p.validCounts) ? $v in $p.validCounts : true",
        ("maxRuntimeHours", "within-spot-wait"): "$v <= $p.maxRuntimeHours",
    }


def _under(prefixes: str) -> str:
    """`$v` starts with one of `prefixes` (a JSONata list)."""
    return f"$count($filter({prefixes}, function($r) {{ $substring($v, 0, $length($r)) = $r }})) > 0"


def _inherited_runs(settings: RunConfig) -> str:
    """With teams[].inherits_single_team_runs, ` or` the pre-teams runs less the other teams' (the s3-express
    directory bucket is each team's own: the pre-teams one is not inherited); otherwise nothing."""
    inherited, foreign = (
        literal(
            [
                f"s3://{placeholder(bucket)}/{each}"
                for bucket in ("CheckpointBucket", "ArtifactBucket")
                for each in getattr(settings, kind, ())
            ]
        )
        for kind in ("inherited_prefixes", "foreign_prefixes")
    )
    return (
        f" or ({_under(inherited)} and $not({_under(foreign)}))"
        if getattr(settings, "inherited", None)
        else ""
    )


def _is_count(name: str) -> str:
    """`$v` (hyperparameters) holds no `name`, or plain digits: the whole text is the first match of
    COUNT_PATTERN, as Python's re.fullmatch reads it (whole, whatever either language's `^...$` would
    make of a final newline)."""
    count = f"$match($lookup($v, {literal(name)}), {regex_literal(COUNT_PATTERN)}, 1).match"
    return f"$not({literal(name)} in $keys($v)) or {count} = $lookup($v, {literal(name)})"


def _profile_rule_causes() -> dict[str, str]:
    """PROFILE_RULES' causes, which name the value and the profile, as JSONata string expressions."""
    return {
        "fits-profile": (
            '"instanceCount " & $string($v) & " does not fit profile " & $p.name & ": it allows " '
            '& $p.countsText & "."'
        ),
        "within-spot-wait": (
            '"maxRuntimeHours must be at most " & $string($p.maxRuntimeHours) & " for profile " '
            '& $p.name & "."'
        ),
    }


def check_input_expression(settings: RunConfig) -> str:
    """The JSONata block that checks `$states.input` against `$profiles` (see module docstring)."""
    conditions = _conditions(settings)
    context = message_context(settings, unknown="\0")
    checks: list[tuple[str, str, str]] = []  # (field, condition that accepts, cause expression)
    for rule in input_rules(settings):
        before, _, after = rule.message.format(**context).partition("\0")
        cause = literal(before) + (f' & $join($unknown, ", ") & {literal(after)}' if after else "")
        checks.append((rule.field, conditions[(rule.field, rule.rule)], cause))
    causes = _profile_rule_causes()
    for profile_rule in PROFILE_RULES:
        checks.append(
            (
                profile_rule.field,
                conditions[(profile_rule.field, profile_rule.rule)],
                causes[profile_rule.rule],
            )
        )
    checks.append(cost_cap_states.input_check())
    chain = "null"
    for field, accepts, cause in reversed(checks):
        value = "$raw" if not field else f"$in.{field}"
        # The cause may name the value: it stays inside the block that binds $v.
        chain = f"($v := {value}; ($exists($v) ? $not({accepts}) : false) ? {cause} : {chain})"
    # First of all, the execution name (it becomes a tag value).
    chain = (
        f"($contains($states.context.Execution.Name, {regex_literal(UNSAFE_EXECUTION_NAME_CHARACTER)}) ? "
        f"{literal(EXECUTION_NAME_MESSAGE)} : {chain})"
    )
    defaults = (
        f'{{"profile": {literal(settings.profiles[0].name)}, '
        f'"runName": {literal(settings.project + "-")} & $states.context.Execution.Name, '
        '"hyperparameters": {}}'
    )
    return (
        "($raw := $states.input;"
        f' $isObject := $type($raw) = "object";'
        " $unknown := $isObject ? $sort($filter($keys($raw), "
        f"function($k) {{ $not($k in {literal(list(input_fields(settings)))}) }})) : [];"
        f" $in := $isObject ? $merge([{defaults}, $raw]) : {{}};"
        ' $p := $type($in.profile) = "string" ? $lookup($profiles, $in.profile) : null;'
        f' {{"problem": {chain}, "input": $in, "profile": $p}})'
    )


def profile_table(profiles: Sequence[Profile], resources: PipelineResources) -> dict[str, Any]:
    """Per profile, by name: its base request and what the checks, the request and the retries need."""
    return {profile.name: _profile_entry(profile, resources) for profile in profiles}


def _profile_entry(profile: Profile, resources: PipelineResources) -> dict[str, Any]:
    request = base_request(profile, resources)
    uncounted = dict(request["ResourceConfig"])
    uncounted.pop("InstanceCount", None)
    if profile.uses_instance_preferences:
        uncounted["InstancePreferences"] = instance_preferences(profile, counted=False)
    valid_counts = [
        count for count in range(1, MAX_INSTANCE_COUNT + 1) if instance_count_problem(profile, count) is None
    ]
    entry: dict[str, Any] = {
        "name": profile.name,
        "request": request,
        "checkpointPrefix": checkpoint_prefix(profile, resources),
        "uncountedResourceConfig": uncounted,
        "maxRuntimeHours": _plain_number(
            profile.max_wait_hours if profile.managed_spot else MAX_RUNTIME_HOURS_LIMIT
        ),
        "countsText": _describe_counts(valid_counts),
        **retry_settings(profile),
        "extraSeconds": extra_time_seconds(profile),
    }
    entry.update(cost_cap_states.profile_cost_cap(profile, resources.region))
    # Where a resumeFrom is read by train.py itself (job_request.resumes_directly); absent: never.
    if direct_resume_prefixes(profile, resources):
        entry["directResumePrefixes"] = direct_resume_prefixes(profile, resources)
    # Listed only when the profile rules some counts out (512 numbers cost parse time on every check).
    if valid_counts != list(range(1, MAX_INSTANCE_COUNT + 1)):
        entry["validCounts"] = valid_counts
    return entry


def retry_settings(profile: Profile) -> dict[str, Any]:
    """The profile's `retry` and `fault_retries` as the machines read them (the pipeline's `$plan`, the
    registration machine's evaluation retries)."""
    retry, faults = profile.retry, profile.fault_retries
    return {
        "maxAttempts": retry.max_attempts,
        "backoff": _backoff(retry),
        "deadlineSeconds": round(retry.deadline_hours * 3600),
        "faultRetries": {
            "maxRetries": faults.max_retries,
            "deadlineShare": _plain_number(faults.max_deadline_share),
            "backoff": _backoff(faults),
        },
    }


def _backoff(policy: Backoff) -> dict[str, Any]:
    return {
        "initialSeconds": policy.initial_backoff_seconds,
        "multiplier": _plain_number(policy.backoff_multiplier),
        "maxSeconds": policy.max_backoff_seconds,
        "jitter": JITTER_FRACTION,
    }


def _plain_number(value: float) -> float | int:
    """8.0 -> 8, as the CLI's messages print it (:g)."""
    return int(value) if float(value).is_integer() else value


def _describe_counts(counts: list[int]) -> str:
    if not counts:
        return "none"
    if counts == list(range(counts[0], counts[-1] + 1)):
        return f"{counts[0]}" if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
    return ", ".join(map(str, counts))


def backoff_seconds_expression(backoff: str, retry_number: str) -> str:
    """The back-off before retry `retry_number` (1 for the first) of the policy `backoff` (a profile
    table entry): initial * multiplier^(retry-1), capped, plus up to JITTER_FRACTION of it at random
    (Backoff.backoffs gives the same bases)."""
    base = (
        f"$min([$round({backoff}.initialSeconds * $power({backoff}.multiplier, {retry_number} - 1)), "
        f"{backoff}.maxSeconds])"
    )
    return f"($base := {base}; $base + $floor($random() * {backoff}.jitter * $base))"
