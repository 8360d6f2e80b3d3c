"""Why a run failed, as the pipeline reads it: a token in SageMaker's failure file and an exit code.

Every failure train.py detects writes one line to `$SM_OUTPUT_DIR/failure` (/opt/ml/output/failure,
which SageMaker reports as the job's FailureReason) and logs the same line as an error:

    trainstack-fault:<cause>:<kind> <PythonError>: <one sentence: rank, step, what to do>

`cause` is `infrastructure` (retry from the checkpoint) or `user` (fail fast). The pipeline matches
FAULT_PATTERN anywhere in FailureReason; docs/training.md ("Failure reasons and exit codes") says
which text SageMaker shows in each case and why, with the toolkit's source lines. An exception is
classified by the same table the pipeline applies to FailureReasons (fault_table.py): by its class where
one says it (torch.OutOfMemoryError, DistNetworkError, DistStoreError, DistBackendError), by its text where
CUDA's and NCCL's errors arrive as a plain RuntimeError.

The Python exception class named after the token is the one that ended the run, or the builtin that
describes it (a hang is a TimeoutError): sagemaker-training's stderr filter starts copying lines into
its ErrorMessage at the first line naming such a class, so the line reaches FailureReason even where
the failure file could not be written.
"""

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from data import UserError
from fault_table import (
    INFRASTRUCTURE,
    PLAN_ENDING_KIND,
    SCRIPT_PATTERNS,
    TOKEN_PATTERN,
    USER,
    FaultPattern,
    first_match,
)

FAULT_PATTERN = re.compile(TOKEN_PATTERN)
# sysexits.h EX_TEMPFAIL, "a temporary failure ... the user is invited to retry later": the watchdog's
# exit, which a launcher passes on (plain python, mpirun); torchrun exits 1 whatever its workers' codes.
EXIT_INFRASTRUCTURE = 75
EXIT_USER_ERROR = 2  # a UserError: a flag, an input or the NaN guard (train.py main)
FAILURE_FILE = "failure"  # in SM_OUTPUT_DIR, where the toolkit writes its own (files.py)

log = logging.getLogger("train")
# Called with the job's failure line after every report (trainstack_runtime points it at the round's
# mlflow_log.MlflowLog.fail: a round the watchdog or an error ends may have no round after it).
REPORT_LISTENERS: list[Callable[[str], None]] = []


@dataclass(frozen=True)
class Fault:
    cause: str
    kind: str
    python_error: str  # the builtin exception class named on the line (see the module docstring)

    @property
    def token(self) -> str:
        return f"trainstack-fault:{self.cause}:{self.kind}"

    def line(self, sentence: str) -> str:
        return f"{self.token} {self.python_error}: {sentence}"


HANG = Fault(INFRASTRUCTURE, "hang", "TimeoutError")  # the watchdog: no optimizer step within its bound
SLOW_HOST = Fault(INFRASTRUCTURE, "slow-host", "TimeoutError")  # rank_health: --end-on-slow-host
# capacity_block: a training plan ends the instances soon (a planned interruption, not the job's failure)
PLAN_ENDING = Fault(INFRASTRUCTURE, PLAN_ENDING_KIND, "TimeoutError")
CONFIG = Fault(USER, "config", "ValueError")  # a UserError: flags, inputs, checkpoints
NONFINITE = Fault(USER, "nonfinite", "FloatingPointError")  # the NaN guard stopped training
EXCEPTION = Fault(USER, "exception", "Exception")  # any other exception in the script
# The builtin named on the line of a fault the table found: the closest one to what happened.
PYTHON_ERRORS = {"oom": "MemoryError", "disk-full": "OSError", "port-in-use": "OSError"}


def table_fault(row: FaultPattern) -> Fault:
    default = "RuntimeError" if row.fault_class == INFRASTRUCTURE else "Exception"
    return Fault(row.fault_class, row.kind, PYTHON_ERRORS.get(row.kind, default))


FAULTS = (HANG, SLOW_HOST, PLAN_ENDING, CONFIG, NONFINITE, EXCEPTION, *map(table_fault, SCRIPT_PATTERNS))


class NonFiniteError(UserError):
    """The NaN guard: the loss, gradients or weights stopped being finite."""


def classify(error: BaseException) -> tuple[Fault, str]:
    """The fault an exception that ended the run stands for, and its sentence."""
    if isinstance(error, NonFiniteError):
        return NONFINITE, str(error)
    if isinstance(error, UserError):
        return CONFIG, str(error)
    said = f"{type(error).__name__}: {_first_line(error)}"
    row = first_match(described(error), SCRIPT_PATTERNS)
    if row is None:
        return EXCEPTION, said
    if row.kind == "oom":
        return table_fault(row), f"{said} Lower --micro-batch-size or use more or larger instances."
    return table_fault(row), said


def described(error: BaseException) -> str:
    """The exception as the table reads it: its class and every base class by name (the table names
    torch's classes: a subclass is classified as its base), then its whole message."""
    names = [cls.__name__ for cls in type(error).__mro__ if cls not in (object, BaseException, Exception)]
    return f"{', '.join(names)}: {error}"


def report(fault: Fault, sentence: str, echo: bool = True) -> str:
    """Write the fault's line to the failure file (the first writer on a host wins: the earliest failure
    is the cause, later ones its consequences) and, if `echo`, log it as an error (of an error that every
    rank agrees on, one rank logs it); REPORT_LISTENERS get the failure file's line (the job's cause).
    Returns the line."""
    line = fault.line(" ".join(sentence.split()))  # one line: FailureReason keeps the first 1024 characters
    path = failure_file()
    if path is not None:
        try:
            write_once(path, line + "\n")
        except OSError as error:
            log.warning("Could not write the failure reason to %s (%s).", path, error.strerror)
    if echo:
        log.error("%s", line)
    recorded = path.read_text().strip() if path is not None and path.exists() else line
    for listener in tuple(REPORT_LISTENERS):
        listener(recorded)
    return line


def failure_file() -> Path | None:
    """$SM_OUTPUT_DIR/failure under the SageMaker toolkit; None in a local run (no SM_OUTPUT_DIR)."""
    output_dir = os.environ.get("SM_OUTPUT_DIR")
    return Path(output_dir) / FAILURE_FILE if output_dir else None


def write_once(path: Path, text: str) -> None:
    """Create `path` holding `text`, whole, unless it exists: written aside, then hard-linked into place
    (link fails on an existing name, so of ranks failing together exactly one line lands)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    aside = path.with_name(f".{path.name}.{os.getpid()}")
    aside.write_text(text)
    try:
        os.link(aside, path)
    except FileExistsError:
        pass
    finally:
        aside.unlink()


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__
