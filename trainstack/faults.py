"""Why a training job failed: every failed attempt is classified from its FailureReason, in one table.

Classes (docs/faults.md explains them and what the pipeline does with each):
- `capacity`: SageMaker found no instances (`CapacityError...`); the attempt machine reports these as
  status `Capacity` before any fault classification, and the pipeline retries them on its capacity budget.
- `infrastructure`: the fleet's fault (a hang the watchdog caught, NCCL/EFA and network errors, hardware
  that cluster repair could not fix, SageMaker's internal errors): retried from the latest checkpoint on
  the profile's `fault_retries` budget.
- `user`: the user's code or data (trainstack's own user tokens, exit code 2, out of memory, any other
  script exception): fails the run at once with the reason.
- `unknown`: nothing matched: retried once.

TOKEN_PATTERN and FAULT_PATTERNS are the only copy of the table: `classify` applies it in Python (the CLI
and the run report) and `fault_expression` turns it into the JSONata the attempt machines run, so the two
cannot disagree (tests/domain/test_faults.py runs both over the same reasons).

The FailureReason SageMaker reports is the first 1,024 characters of `/opt/ml/output/failure`
(sagemaker-training 5.1.4 `files.write_failure_file`, quoting SageMaker's "How Amazon SageMaker AI
Provides Training Information"); the toolkit writes that file only if the script has not written it
first, and SageMaker prefixes algorithm failures with `AlgorithmError: `. So a pattern is searched
anywhere in the text, except the two that SageMaker itself puts first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

# SageMaker's FailureReason for a job it could not give instances (DESIGN.md, "Facts"): today's capacity
# path in the attempt machines, unchanged.
CAPACITY_REASON_PREFIX = "CapacityError"
# Managed spot: capacity never came within MaxWaitTimeInSeconds (job Stopped with this SecondaryStatus).
SPOT_CAPACITY_SECONDARY_STATUS = "MaxWaitTimeExceeded"

INFRASTRUCTURE = "infrastructure"
USER = "user"
UNKNOWN = "unknown"
FaultClass = Literal["infrastructure", "user", "unknown"]
# The token train.py writes first in /opt/ml/output/failure and logs (training_scripts/faults.py
# FAULT_PATTERN, the same text: tests/training/test_fault_token.py): `trainstack-fault:<class>:<kind>
# <PythonError>: <sentence>` (docs/training.md, "Failure reasons and exit codes"). Its first occurrence
# decides: on a host the first failure is the cause, what follows its consequences.
TOKEN_PATTERN = "trainstack-fault:(infrastructure|user):([a-z]+)"
# Unknown failures are retried this often per run.
UNKNOWN_RETRIES = 1
# Causes and retry records keep this much of a FailureReason (SageMaker's own limit is 1,024).
REASON_EXCERPT_CHARS = 300


@dataclass(frozen=True)
class FaultPattern:
    """One row of the table: a regular expression (searched case-insensitively anywhere in the
    FailureReason; only the JavaScript/Python common subset: literals, `|`, `^`, `\\b`, `.`, `*`) and
    where the text it matches comes from."""

    fault_class: FaultClass
    kind: str
    pattern: str
    source: str


@dataclass(frozen=True)
class Fault:
    fault_class: FaultClass
    kind: str

    def as_dict(self) -> dict[str, str]:
        return {"class": self.fault_class, "kind": self.kind}


# After the token (TOKEN_PATTERN, which names its own class and kind), the first match wins: SageMaker's
# own prefix, exit codes the toolkit reports, out
# of memory (an OOM on one rank makes the others report NCCL errors: the OOM is the cause), the fleet's
# errors, then any other script exception.
FAULT_PATTERNS: tuple[FaultPattern, ...] = (
    FaultPattern(
        INFRASTRUCTURE,
        "sagemaker-internal",
        "^InternalServerError",
        "SageMaker API reference, RetryStrategy: 'when a training job fails due to an InternalServerError'; "
        "DESIGN.md Facts (FailureReason `InternalServerError: ...`)",
    ),
    FaultPattern(
        INFRASTRUCTURE,
        "hang",
        "ExitCode 75\\b",
        "sagemaker-training 5.1.4 errors.py (`ExecuteUserScriptError:\\nExitCode N`) with the watchdog's "
        "exit code 75 (docs/training.md), when its failure file was not written",
    ),
    FaultPattern(
        USER,
        "config",
        "ExitCode 2\\b",
        "sagemaker-training 5.1.4 errors.py (`ExitCode N`) with train.py's exit code 2 for a user "
        "error (docs/training.md; also argparse's exit code for a bad flag)",
    ),
    FaultPattern(
        USER,
        "oom",
        "OutOfMemoryError|CUDA out of memory|OutOfMemory: Process killed",
        "torch.cuda.OutOfMemoryError ('CUDA out of memory. Tried to allocate ...'); sagemaker-training "
        "5.1.4 process.py: exit code 137 is reported as 'OutOfMemory: Process killed by SIGKILL (signal 9)'",
    ),
    FaultPattern(
        INFRASTRUCTURE,
        "collective-timeout",
        "Watchdog caught collective operation timeout",
        "PyTorch ProcessGroupNCCL.cpp: '[Rank N] Watchdog caught collective operation timeout: "
        "WorkNCCL(...) ran for N milliseconds before timing out'",
    ),
    FaultPattern(
        INFRASTRUCTURE,
        "nccl",
        "unhandled system error|remote process exited or there was a network error|"
        "NCCL error.*internal error|ncclSystemError|ncclRemoteError|ncclInternalError",
        "NCCL src/init.cc ncclGetErrorString (ncclSystemError 'unhandled system error', ncclRemoteError "
        "'remote process exited or there was a network error', ncclInternalError 'internal error'), as "
        "PyTorch reports them ('NCCL error in: <file>:<line>, ...'); EFA/libfabric failures reach "
        "PyTorch through aws-ofi-nccl as these NCCL results (aws/aws-ofi-nccl#715: DistBackendError: NCCL "
        "error on 2 x ml.p4d.24xlarge)",
    ),
    FaultPattern(
        INFRASTRUCTURE,
        "network",
        "DistNetworkError|RendezvousConnectionError|Connection reset by peer",
        "PyTorch torch.distributed.DistNetworkError ('raised when network errors occur') and torchrun's "
        "RendezvousConnectionError; ECONNRESET's strerror 'Connection reset by peer' (c10d TCPStore)",
    ),
    FaultPattern(
        INFRASTRUCTURE,
        "hardware",
        "hardware failure|uncorrectable ECC error",
        "SageMaker developer guide, 'Cluster repairs for GPU errors' (status 'Repairing training cluster "
        "due to hardware failure'; 'If the cluster repair fails, the training job will also fail': the "
        "FailureReason's wording is assumed to name the hardware failure); CUDA runtime error string "
        "'uncorrectable ECC error encountered' (cudaErrorECCUncorrectable)",
    ),
    FaultPattern(
        USER,
        "script",
        "ExecuteUserScriptError|ImportModuleError|InstallRequirementsError|InstallModuleError",
        "sagemaker-training 5.1.4 errors.py: the error classes the toolkit reports when the entry point, "
        "its import or its requirements fail (FailureReason 'AlgorithmError: ExecuteUserScriptError:\\n"
        'ExitCode N\\nErrorMessage "..."\', aws/amazon-sagemaker-examples#3444)',
    ),
)

_COMPILED = tuple((row, re.compile(row.pattern, re.IGNORECASE)) for row in FAULT_PATTERNS)


def classify(reason: str | None) -> Fault:
    """The class and kind of a failed job's FailureReason (not a capacity failure: see the module)."""
    text = reason or ""
    token = re.search(TOKEN_PATTERN, text)
    if token is not None:
        return Fault(token.group(1), token.group(2))  # type: ignore[arg-type]
    for row, pattern in _COMPILED:
        if pattern.search(text):
            return Fault(row.fault_class, row.kind)
    return Fault(UNKNOWN, UNKNOWN)


def _regex(pattern: str) -> str:
    return "/" + pattern.replace("/", "\\/") + "/i"


def _string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def fault_expression(reason: str) -> str:
    """JSONata: {"class", "kind"} of the FailureReason that the JSONata expression `reason` yields."""
    chain = f'{{"class": {_string(UNKNOWN)}, "kind": {_string(UNKNOWN)}}}'
    for row in reversed(FAULT_PATTERNS):
        result = f'{{"class": {_string(row.fault_class)}, "kind": {_string(row.kind)}}}'
        chain = f"($contains($r, {_regex(row.pattern)}) ? {result} : {chain})"
    token = "/" + TOKEN_PATTERN + "/"
    return (
        f'($r := {reason} ? {reason} : ""; $token := $match($r, {token}); '
        f'$exists($token[0]) ? {{"class": $token[0].groups[0], "kind": $token[0].groups[1]}} : {chain})'
    )


def describe(fault: dict[str, str] | Fault) -> str:
    """`infrastructure fault (nccl)`, as causes, the CLI and the report name it."""
    values = fault.as_dict() if isinstance(fault, Fault) else fault
    noun = "error" if values["class"] == USER else "fault"
    return f"{values['class']} {noun} ({values['kind']})"
