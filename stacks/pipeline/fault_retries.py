"""The pipeline's decisions on a failed attempt, as JSONata over `$outcome` (the attempt's output, whose
`fault` the attempt machine classified with trainstack.faults), `$plan` and the run's counters.

- An infrastructure fault is retried while the profile's `fault_retries` allow: fewer than `max_retries`
  so far, and the next attempt can start before `max_deadline_share` of the run's time limit has passed
  (`$plan.faultDeadlineMillis`), after the longest back-off.
- An unknown failure is retried UNKNOWN_RETRIES times per run, on the same back-off and deadline.
- A user error, an unknown failure already retried and an infrastructure fault past its budget end the
  run (`TrainingFailed`, `InfrastructureRetriesExhausted`), their causes naming the classification.

Counters: `$faults` {"infrastructure", "unknown"} counts the retries made so far; `$retriedFaults` lists
them ({attempt, job, class, kind, reason}) for the output, the causes and `trainstack status`.
Capacity keeps its own budget: `capacity_attempts()` leaves the fault retries out of the attempt count.
The registration machine applies the same decisions to its evaluation jobs (registry/evaluation_states.py).
"""

from __future__ import annotations

from stacks.pipeline.jsonata_text import literal
from stacks.pipeline.pipeline_input_rules import backoff_seconds_expression
from trainstack.faults import INFRASTRUCTURE, REASON_EXCERPT_CHARS, UNKNOWN, UNKNOWN_RETRIES, USER

FAULT_BACKOFF = "$plan.faultRetries.backoff"
RETRIES_MADE = "($faults.infrastructure + $faults.unknown)"
NO_FAULTS_YET = f'{{"{INFRASTRUCTURE}": 0, "{UNKNOWN}": 0}}'


def capacity_attempts() -> str:
    """Attempts that count against the capacity budget: all but those that followed a fault retry."""
    return f"($attempt - {RETRIES_MADE})"


def capacity_retry_allowed() -> str:
    """Another attempt fits the capacity budget: attempts left, and it starts before the retry deadline
    even after its longest backoff (cap plus jitter)."""
    time_left = (
        "$millis() + 1000 * $plan.backoff.maxSeconds * (1 + $plan.backoff.jitter) <= $plan.deadlineMillis"
    )
    return f"{capacity_attempts()} < $plan.maxAttempts and {time_left}"


def _failed_as(fault_class: str) -> str:
    return f'$outcome.status = "Failed" and $outcome.fault.class = {literal(fault_class)}'


def fault_retry_condition() -> str:
    """A failed attempt that is retried from the checkpoint."""
    time_left = (
        f"$millis() + 1000 * {FAULT_BACKOFF}.maxSeconds * (1 + {FAULT_BACKOFF}.jitter) "
        "<= $plan.faultDeadlineMillis"
    )
    return (
        f"(({_failed_as(INFRASTRUCTURE)} and $faults.infrastructure < $plan.faultRetries.maxRetries) or "
        f"({_failed_as(UNKNOWN)} and $faults.unknown < {UNKNOWN_RETRIES})) and {time_left}"
    )


def infrastructure_exhausted_condition() -> str:
    return _failed_as(INFRASTRUCTURE)


def described_fault() -> str:
    """`infrastructure fault (nccl)` / `user error (oom)`, as trainstack.faults.describe writes it."""
    return (
        f'$outcome.fault.class & ($outcome.fault.class = {literal(USER)} ? " error" : " fault") '
        '& " (" & $outcome.fault.kind & ")"'
    )


def fault_retry_assignments() -> dict[str, str]:
    """What a fault retry assigns (JSONata expressions, all read the values before the retry)."""
    counted = (
        f"$outcome.fault.class = {literal(INFRASTRUCTURE)} "
        '? {"infrastructure": $faults.infrastructure + 1, "unknown": $faults.unknown} '
        ': {"infrastructure": $faults.infrastructure, "unknown": $faults.unknown + 1}'
    )
    record = (
        '{"attempt": $attempt, "job": $outcome.job.name, "class": $outcome.fault.class, '
        f'"kind": $outcome.fault.kind, "reason": $substring($outcome.cause, 0, {REASON_EXCERPT_CHARS})}}'
    )
    return {
        "attempt": "$attempt + 1",
        "faults": counted,
        "retriedFaults": f"$append($retriedFaults, [{record}])",
        "backoffSeconds": backoff_seconds_expression(FAULT_BACKOFF, f"({RETRIES_MADE} + 1)"),
    }


def earlier_retries() -> str:
    return (
        '($count($retriedFaults) = 0 ? "" : " Retried before: " & $join($retriedFaults.('
        '"attempt " & $string(attempt) & " " & class & " (" & kind & ")"), ", ") & ".")'
    )


def training_failed_cause() -> str:
    """TrainingFailed: the job's own cause (its FailureReason), then how it was classified."""
    return f'$outcome.cause & " Classified: " & {described_fault()} & "." & {earlier_retries()}'


def infrastructure_exhausted_cause() -> str:
    why = (
        "$faults.infrastructure >= $plan.faultRetries.maxRetries "
        '? "profile " & $plan.profile & " allows " & $string($plan.faultRetries.maxRetries) '
        '& " infrastructure retries (fault_retries.max_retries)" '
        ': "the next attempt could not start within " & $string($plan.faultRetries.deadlineShare * 100) '
        '& "% of the run\'s time limit (fault_retries.max_deadline_share of profile " & $plan.profile & ")"'
    )
    return (
        f'"Training job " & $outcome.job.name & " failed with an " & {described_fault()} '
        f'& " and no retry is left: " & ({why}) & ". " & $outcome.cause & {earlier_retries()}'
    )
