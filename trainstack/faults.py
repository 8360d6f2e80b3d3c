"""Why a training job failed: every failed attempt is classified from its FailureReason, in one table.

Classes (docs/faults.md explains them and what the pipeline does with each):
- `capacity`: SageMaker found no instances; the attempt machines report these as status `Capacity`, and
  the pipeline retries them on its capacity budget.
- `infrastructure`: the fleet's fault (a hang the watchdog caught, GPU hardware, EFA, NCCL, the c10d store
  and the network, SageMaker's internal errors): retried from the latest checkpoint on the profile's
  `fault_retries` budget.
- `user`: the user's code, data or setup (trainstack's own user tokens, exit code 2, out of memory, a full
  disk, a port in use, NCCL misuse, SageMaker's ClientError, any other script exception): fails the run
  at once with the reason.
- `unknown`: nothing matched: retried once.

The table itself is training_scripts/fault_table.py (TOKEN_PATTERN, FAULT_PATTERNS), which train.py in the
image applies to the exception that ended it. Here `classify` applies it in Python (the CLI and the run
report) and `fault_expression` turns it into the JSONata the attempt machines run, so none of the three can
disagree (tests/faults/test_corpus.py runs them over the same real texts).

The FailureReason SageMaker reports is the first 1,024 characters of `/opt/ml/output/failure`
(sagemaker-training 5.1.4 `files.write_failure_file`, quoting SageMaker's "How Amazon SageMaker AI
Provides Training Information"); the toolkit writes that file only if the script has not written it
first, and SageMaker prefixes algorithm failures with `AlgorithmError: `. So a pattern is searched
anywhere in the text, except those that SageMaker itself puts first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from training_scripts.fault_table import (
    CAPACITY,
    FAULT_PATTERNS,
    INFRASTRUCTURE,
    TOKEN_PATTERN,
    UNKNOWN,
    USER,
    first_match,
)
from trainstack.jsonata_regex import regex_literal

# The table's names, used here and by the CLI, the report and the stacks.
__all__ = [
    "CAPACITY",
    "FAULT_PATTERNS",
    "INFRASTRUCTURE",
    "REASON_EXCERPT_CHARS",
    "SPOT_CAPACITY_SECONDARY_STATUS",
    "TOKEN_PATTERN",
    "UNKNOWN",
    "UNKNOWN_RETRIES",
    "USER",
    "Fault",
    "capacity_expression",
    "classify",
    "describe",
    "fault_expression",
]

# Managed spot: capacity never came within MaxWaitTimeInSeconds (job Stopped with this SecondaryStatus).
SPOT_CAPACITY_SECONDARY_STATUS = "MaxWaitTimeExceeded"

FaultClass = Literal["capacity", "infrastructure", "user", "unknown"]
# Unknown failures are retried this often per run.
UNKNOWN_RETRIES = 1
# Causes and retry records keep this much of a FailureReason (SageMaker's own limit is 1,024).
REASON_EXCERPT_CHARS = 300


@dataclass(frozen=True)
class Fault:
    fault_class: FaultClass
    kind: str

    def as_dict(self) -> dict[str, str]:
        return {"class": self.fault_class, "kind": self.kind}


def classify(reason: str | None) -> Fault:
    """The class and kind of a failed job's FailureReason. train.py's token decides where there is one (its
    first occurrence: on a host the first failure is the cause, what follows its consequences); else the
    table's first matching row; else unknown."""
    text = reason or ""
    token = re.search(TOKEN_PATTERN, text)
    if token is not None:
        return Fault(token.group(1), token.group(2))  # type: ignore[arg-type]
    row = first_match(text)
    return Fault(row.fault_class, row.kind) if row else Fault(UNKNOWN, UNKNOWN)  # type: ignore[arg-type]


def _string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def fault_expression(reason: str) -> str:
    """JSONata: {"class", "kind"} of the FailureReason that the JSONata expression `reason` yields."""
    chain = f'{{"class": {_string(UNKNOWN)}, "kind": {_string(UNKNOWN)}}}'
    for row in reversed(FAULT_PATTERNS):
        result = f'{{"class": {_string(row.fault_class)}, "kind": {_string(row.kind)}}}'
        chain = f"($contains($r, {regex_literal(row.pattern, 'i')}) ? {result} : {chain})"
    token = "/" + TOKEN_PATTERN + "/"
    return (
        f'($r := {reason} ? {reason} : ""; $token := $match($r, {token}); '
        f'$exists($token[0]) ? {{"class": $token[0].groups[0], "kind": $token[0].groups[1]}} : {chain})'
    )


def capacity_expression(reason: str) -> str:
    """JSONata: true when the FailureReason that `reason` yields is the table's capacity (the attempt
    machines report it as status `Capacity`, which keeps its own budget)."""
    return f"{fault_expression(reason)}.class = {_string(CAPACITY)}"


def describe(fault: dict[str, str] | Fault) -> str:
    """`infrastructure fault (nccl)`, as causes, the CLI and the report name it."""
    values = fault.as_dict() if isinstance(fault, Fault) else fault
    noun = "error" if values["class"] == USER else "fault"
    return f"{values['class']} {noun} ({values['kind']})"
