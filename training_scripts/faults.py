"""Why a run failed, as the pipeline reads it: a token in SageMaker's failure file and an exit code.

Every failure train.py detects writes one line to `$SM_OUTPUT_DIR/failure` (/opt/ml/output/failure,
which SageMaker reports as the job's FailureReason) and logs the same line as an error:

    trainstack-fault:<cause>:<kind> <PythonError>: <one sentence: rank, step, what to do>

`cause` is `infrastructure` (retry from the checkpoint) or `user` (fail fast). The pipeline matches
FAULT_PATTERN anywhere in FailureReason; docs/training.md ("Failure reasons and exit codes") says
which text SageMaker shows in each case and why, with the toolkit's source lines.

The Python exception class named after the token is the one that ended the run, or the builtin that
describes it (a hang is a TimeoutError): sagemaker-training's stderr filter starts copying lines into
its ErrorMessage at the first line naming such a class, so the line reaches FailureReason even where
the failure file could not be written.
"""

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from data import UserError

INFRASTRUCTURE, USER = "infrastructure", "user"
FAULT_PATTERN = re.compile(r"trainstack-fault:(infrastructure|user):([a-z]+)")
# sysexits.h EX_TEMPFAIL, "a temporary failure ... the user is invited to retry later": the watchdog's
# exit, which a launcher passes on (plain python, mpirun); torchrun exits 1 whatever its workers' codes.
EXIT_INFRASTRUCTURE = 75
EXIT_USER_ERROR = 2  # a UserError: a flag, an input or the NaN guard (train.py main)
FAILURE_FILE = "failure"  # in SM_OUTPUT_DIR, where the toolkit writes its own (files.py)

log = logging.getLogger("train")


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
COLLECTIVE = Fault(INFRASTRUCTURE, "collective", "RuntimeError")  # a DistError, or gloo's transport failed
CONFIG = Fault(USER, "config", "ValueError")  # a UserError: flags, inputs, checkpoints
NONFINITE = Fault(USER, "nonfinite", "FloatingPointError")  # the NaN guard stopped training
OOM = Fault(USER, "oom", "MemoryError")  # torch.OutOfMemoryError
EXCEPTION = Fault(USER, "exception", "Exception")  # any other exception in the script
FAULTS = (HANG, COLLECTIVE, CONFIG, NONFINITE, OOM, EXCEPTION)


class NonFiniteError(UserError):
    """The NaN guard: the loss, gradients or weights stopped being finite."""


def classify(error: BaseException) -> tuple[Fault, str]:
    """The fault an exception that ended the run stands for, and its sentence."""
    if isinstance(error, NonFiniteError):
        return NONFINITE, str(error)
    if isinstance(error, UserError):
        return CONFIG, str(error)
    if isinstance(error, torch.OutOfMemoryError):
        return OOM, f"{_first_line(error)} Lower --micro-batch-size or use more or larger instances."
    # NCCL errors, store and network failures; gloo's transport raises a plain RuntimeError naming its source
    # ("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer ...").
    if isinstance(error, torch.distributed.DistError) or "gloo/transport/" in str(error):
        return COLLECTIVE, f"{type(error).__name__}: {_first_line(error)}"
    return EXCEPTION, f"{type(error).__name__}: {_first_line(error)}"


def report(fault: Fault, sentence: str, echo: bool = True) -> str:
    """Write the fault's line to the failure file (the first writer on a host wins: the earliest failure
    is the cause, later ones its consequences) and, if `echo`, log it as an error (of an error that every
    rank agrees on, one rank logs it). Returns the line."""
    line = fault.line(" ".join(sentence.split()))  # one line: FailureReason keeps the first 1024 characters
    path = failure_file()
    if path is not None:
        try:
            _write_once(path, line + "\n")
        except OSError as error:
            log.warning("Could not write the failure reason to %s (%s).", path, error.strerror)
    if echo:
        log.error("%s", line)
    return line


def failure_file() -> Path | None:
    """$SM_OUTPUT_DIR/failure under the SageMaker toolkit; None in a local run (no SM_OUTPUT_DIR)."""
    output_dir = os.environ.get("SM_OUTPUT_DIR")
    return Path(output_dir) / FAILURE_FILE if output_dir else None


def _write_once(path: Path, text: str) -> None:
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
