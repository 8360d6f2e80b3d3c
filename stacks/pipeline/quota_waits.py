"""Quota refusals (ResourceLimitExceeded) in both attempt kinds and the pipeline, as JSONata and states.

trainstack.quota reads SageMaker's refusal: the quota's name, instance type, limit, utilization and the
request's delta; busy when the request alone fits the limit (other jobs hold the quota), exceeded when
it does not. An attempt reports status `Quota` with that reading as `quota` (null when the wording is
not the one known: treated as exceeded).

SageMaker checks the quota of every type of a request's InstancePreferences, not only the one it would
select, and refuses the whole request when any falls short, even when the types ahead of it would have
succeeded (SageMaker developer guide, "Instance preference lists for training jobs", Service quotas).
So the pipeline, in both modes:
- leaves the refused type out of the next request (`$quotaSkipped`) and tries the remaining preferences
  at once, while any remain (a new attempt: the refused create made no job);
- when none remain and any refused type was busy: backs off like capacity (the profile's `retry`
  back-off, attempts and deadline; CreateTrainingJob, or queue mode's submission, again with the busy
  types back in the request, as after a capacity back-off, and the exceeded ones left out); once that
  budget is spent the run fails with `CapacityExhausted`, its cause ending with the last refusal;
- when none remain and every refused type was exceeded (or the wording was not recognised): fails at
  once with `QuotaExceeded`, naming the quotas.
Each busy refusal is a `QuotaWait`: listed in `$quotaWaits` (execution output, `trainstack status`,
`trainstack report`) and published as the `QuotaWaits` metric (attempt_metrics.py).
"""

from __future__ import annotations

from aws_cdk import aws_stepfunctions as sfn

from stacks.pipeline.fault_retries import capacity_attempts, capacity_retry_allowed
from stacks.pipeline.jsonata_text import expression
from stacks.pipeline.pipeline_input_rules import backoff_seconds_expression
from stacks.pipeline.plan_endings import PLANS_ENDED
from trainstack.quota import quota_expression

QUOTA_STATUS = "Quota"
SKIPPED = "quotaSkipped"
WAITS = "quotaWaits"
# The preferences of the run's request not yet left out: for their quota, or because their training plan
# ended (plan_endings.py).
_PREFERENCES = "$request.ResourceConfig.InstancePreferences"
_LEFT_OUT = f"$append(${SKIPPED}.instanceType, ${PLANS_ENDED})"
_LEFT = f"$filter({_PREFERENCES}.InstanceType, function($t) {{ $not($t in {_LEFT_OUT}) }})"
_REFUSED = f'$outcome.status = "{QUOTA_STATUS}" and $outcome.quota != null'
_ANY_BUSY = f"($outcome.quota.busy or true in ${SKIPPED}.busy)"


def quota_outcome(message: str, refused: str) -> str:
    """The attempt's output for a quota refusal: `message` is SageMaker's text (a JSONata expression:
    the create's Cause, or the service job's statusReason), `refused` starts the cause."""
    cause = (
        f'{refused} & ": " & ($q = null ? "a service quota is exhausted (" & $m & "); its wording was '
        "not recognised, so it is treated as exceeded. Request a higher quota in Service Quotas or wait "
        'for running jobs to end." : $q.busy ? "quota \'" & $q.name & "\' is busy: " & '
        '$string($q.utilization) & " of its " & $string($q.limit) & " instances are in use by other jobs, " '
        '& $string($q.delta) & " requested; it clears when they end (" & $m & ")." : "the " & '
        '$string($q.delta) & " instances requested exceed quota \'" & $q.name & "\' of " & '
        '$string($q.limit) & " instances; request a higher quota in Service Quotas (" & $m & ").")'
    )
    return expression(
        f"($m := {message}; $q := {quota_expression('$m')}; "
        f'{{"status": "{QUOTA_STATUS}", "cause": {cause}, "quota": $q}})'
    )


def quota_start_assignments() -> dict[str, str]:
    """What the run starts with: nothing left out, no wait."""
    return {SKIPPED: expression("[]"), WAITS: expression("[]")}


def request_without_skipped() -> str:
    """The run's request without the preferences left out for their quota or their ended training plan
    (what the next attempt asks for, and what the evaluation of a Completed run asks for: the types it was
    just refused stay out)."""
    kept = f"[{_PREFERENCES}[$not(InstanceType in {_LEFT_OUT})]]"
    return (
        f"($exists({_PREFERENCES}) and $count({_LEFT_OUT}) > 0 ? $merge([$request, "
        f'{{"ResourceConfig": $merge([$request.ResourceConfig, {{"InstancePreferences": {kept}}}])}}]) '
        ": $request)"
    )


def attempt_request(attempt_fields: str) -> str:
    """The attempt's request: request_without_skipped() with the attempt's own fields (`attempt_fields`, a
    JSONata object) merged in."""
    return f"$merge([{request_without_skipped()}, {attempt_fields}])"


def preferences_left() -> str:
    """The instance types the run's request still offers (none left out)."""
    return _LEFT


def _exceeded_only(skipped: str) -> str:
    return f"[({skipped})[busy = false]]"


def busy_types_back() -> dict[str, str]:
    """After any back-off (a capacity one too) the busy types are asked for again: other jobs may have
    ended; the exceeded ones stay out."""
    return {SKIPPED: expression(_exceeded_only(f"${SKIPPED}"))}


def _record_refusal() -> dict[str, str]:
    refusal = (
        '{"instanceType": $outcome.quota.instanceType, "name": $outcome.quota.name, '
        '"busy": $outcome.quota.busy}'
    )
    wait = (
        '{"attempt": $attempt, "quota": $outcome.quota.name, "instanceType": $outcome.quota.instanceType, '
        '"limit": $outcome.quota.limit, "utilization": $outcome.quota.utilization, '
        '"delta": $outcome.quota.delta}'
    )
    return {
        "attempt": "$attempt + 1",
        WAITS: f"$outcome.quota.busy ? $append(${WAITS}, [{wait}]) : ${WAITS}",
        SKIPPED: f"$append(${SKIPPED}, [{refusal}])",
    }


def add_quota_branches(
    classify: sfn.Choice,
    run_attempt: sfn.IChainable,
    wait_before_retry: sfn.IChainable,
    capacity_exhausted: sfn.IChainable,
) -> None:
    """ClassifyAttempt's branches for a quota refusal it could read (an unread one, and one exceeded
    with no preference left, take the pipeline's QuotaExceeded branch)."""
    next_preference = f"{_REFUSED} and $outcome.quota.instanceType in {_LEFT} and $count({_LEFT}) > 1"
    classify.when(
        sfn.Condition.jsonata(expression(next_preference)),
        run_attempt,
        assign={name: expression(value) for name, value in _record_refusal().items()},
        comment="A refused preference is left out and the others are tried at once.",
    )
    recorded = _record_refusal()
    back_off = {
        **recorded,
        SKIPPED: _exceeded_only(recorded[SKIPPED]),
        "backoffSeconds": backoff_seconds_expression("$plan.backoff", capacity_attempts()),
    }
    classify.when(
        sfn.Condition.jsonata(expression(f"{_REFUSED} and {_ANY_BUSY} and {capacity_retry_allowed()}")),
        wait_before_retry,
        assign={name: expression(value) for name, value in back_off.items()},
        comment="Other jobs hold the quota: wait like for capacity.",
    )
    classify.when(sfn.Condition.jsonata(expression(f"{_REFUSED} and {_ANY_BUSY}")), capacity_exhausted)


def capacity_exhausted_cause(retries_cause: str, *, queued: bool) -> str:
    """CapacityExhausted's cause: the pipeline's retries cause (`retries_cause`), but in queue mode after
    a capacity failure Batch's own (Batch retried it until the queue's capacity_wait_hours); quota waits
    are the pipeline's in both modes."""
    if not queued:
        return retries_cause
    return f'$outcome.status = "{QUOTA_STATUS}" ? {retries_cause} : $outcome.cause'


def quota_exceeded_cause() -> str:
    """QuotaExceeded: the last refusal, and the preferences left out earlier for an exceeded quota."""
    return (
        f'$outcome.cause & ($e := ${SKIPPED}[busy = false].name; $count($e) > 0 ? " The other instance '
        'preferences are over their quotas too: " & $join($e, ", ") & "." : "")'
    )
