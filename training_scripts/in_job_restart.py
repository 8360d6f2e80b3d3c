"""In-job recovery: torchrun restarts the workers inside the same job; each new round decides first whether
the fault that ended the last one allows it (docs/training.md, "In-job restarts").

torchrun, the SageMaker toolkit's launcher for torchrun and SMP v2 profiles, restarts every worker of its
node when one of them fails, up to `--max-restarts` times. The toolkit never passes that flag
(sagemaker-training 5.1.4 torch_distributed.py builds `torchrun --nnodes --nproc_per_node [--master_addr
--master_port --node_rank] train.py ...`), but torchrun reads every flag's default from `PET_<FLAG>`
(torch/distributed/argparse_util.py `env`), and the toolkit starts it with the container's environment
(process.py: `env=os.environ`): the job request sets PET_MAX_RESTARTS from the profile's `in_job_restarts`.
A restarted round runs the same command in the same container: no provisioning, no image pull, and the
newest complete checkpoint under --checkpoint-dir resumes it.

A round after a restart (TORCHELASTIC_RESTART_COUNT > 0, set by torchrun's agent):
1. `begin_round`, first thing in train.py: the previous round's failure line ($SM_OUTPUT_DIR/failure) moves
   to $SM_OUTPUT_DIR/restarts/round-<N>.failure (the first rank of the node to arrive moves it, under a
   lock), so that SageMaker reports this round's own failure, and a round that succeeds leaves none.
2. `refused_restart`, once the process group is up: each rank finds its reason to refuse, the first one
   found is every rank's (distributed.agree). A restart is refused after a fault that does not leave the
   instances healthy or would only repeat (any kind but fault_table.IN_JOB_RESTARTABLE_KINDS: the user's
   errors, hardware, a slow host, a training plan's end), and when this rank's GPU fails a small
   computation (the node's health, checked before any training). A worker that crashed without writing
   a reason (a segfault, a kill) is restartable: its peers' lost connections are what the others report.
3. A refused round writes the refusing line as its failure (the previous fault, or the GPU's), leaves a
   DECLINED marker and exits as that fault; the rounds torchrun still starts find the marker and exit at
   once, before any collective. The job then fails as it would have without restarts, for the pipeline's
   retry on new instances (docs/faults.md); SageMaker's cluster repair acts on GPU faults by itself.
With a budget of N restarts the N+1-th failure ends the job the same way: today's failure path.
"""

import fcntl
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from distributed import Runtime, agree
from fault_table import IN_JOB_RESTARTABLE_KINDS, INFRASTRUCTURE, USER, first_match
from faults import EXIT_INFRASTRUCTURE, EXIT_USER_ERROR, FAULT_PATTERN, classify, failure_file, write_once

ROUND_ENV = "TORCHELASTIC_RESTART_COUNT"  # torchrun's restart count, in every worker's environment
RECORD_DIR = "restarts"  # under SM_OUTPUT_DIR
DECLINED = "declined"
PROBE_SIZE = 256  # the GPU check: a PROBE_SIZE x PROBE_SIZE matrix of ones squared, summed

log = logging.getLogger("train")


@dataclass(frozen=True)
class Round:
    number: int  # restarts so far in this job
    previous_reason: str | None  # the failure line of the round before (None: it wrote none)
    declined: str | None  # the line an earlier round refused with, if one did

    @property
    def previous_fault(self) -> str:
        """What ended the round before, in words."""
        return self.previous_reason or "a worker ended without a reason (a crash)"


def restart_round() -> int:
    return int(os.environ.get(ROUND_ENV, "0"))


def round_record(number: int, kind: str) -> Path | None:
    """$SM_OUTPUT_DIR/restarts/round-<number>.<kind>: what round `number` leaves for the rounds after it
    (its failure line, its MLflow run); None in a local run."""
    failure = failure_file()
    return failure.parent / RECORD_DIR / f"round-{number}.{kind}" if failure is not None else None


def begin_round() -> Round | None:
    """Set the previous round's failure line aside (module docstring); None in a job's first round."""
    number = restart_round()
    if number == 0:
        return None
    failure, aside = failure_file(), round_record(number - 1, "failure")
    if failure is None or aside is None:  # a local run: no failure file, nothing recorded
        return Round(number, None, None)
    record = aside.parent
    record.mkdir(parents=True, exist_ok=True)
    with (record / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the node's ranks arrive together; one moves the file
        if not aside.exists():
            if failure.exists():
                failure.rename(aside)
            else:
                aside.write_text("")
        declined = record / DECLINED
        return Round(
            number,
            aside.read_text().strip() or None,
            declined.read_text().strip() if declined.exists() else None,
        )


def reason_to_refuse(reason: str | None) -> str | None:
    """Why the fault of this failure line rules out a restart in the same job; None where it allows one."""
    if reason is None:
        return None
    token = FAULT_PATTERN.search(reason)
    if token:
        fault_class, kind = token.groups()
    else:
        row = first_match(reason)
        fault_class, kind = (row.fault_class, row.kind) if row else ("unknown", "unknown")
    if fault_class == INFRASTRUCTURE and kind in IN_JOB_RESTARTABLE_KINDS:
        return None
    return reason


def device_problem(runtime: Runtime) -> str | None:
    """This rank's GPU, checked before a restarted round trains on it: a failure line, or None."""
    if runtime.device.type != "cuda":
        return None
    try:
        ones = torch.ones(PROBE_SIZE, PROBE_SIZE, device=runtime.device)
        total = (ones @ ones).sum().item()
    except RuntimeError as error:  # CUDA's errors (ECC, fallen off the bus, busy or unavailable)
        fault, sentence = classify(error)
        return fault.line(f"Rank {runtime.rank} failed the GPU check before an in-job restart: {sentence}")
    if total != PROBE_SIZE**3:
        return (
            f"trainstack-fault:{INFRASTRUCTURE}:hardware RuntimeError: Rank {runtime.rank}'s GPU computed "
            f"{total:g} instead of {PROBE_SIZE**3} in the check before an in-job restart."
        )
    return None


def refused_restart(runtime: Runtime, current: Round | None) -> int | None:
    """In a restarted round, on every rank: the exit code if the restart is refused (its line written as
    the failure and the refusal recorded), else None after rank 0 announced the restart."""
    if current is None:
        return None
    own = reason_to_refuse(current.previous_reason) or device_problem(runtime)
    refusal = agree(runtime, own)
    if refusal is None:
        if runtime.is_main:
            log.warning(
                "In-job restart %d: the workers were restarted inside the same job after %s; training "
                "resumes from the newest complete checkpoint.",
                current.number,
                current.previous_fault,
            )
        return None
    return decline(refusal, echo=runtime.is_main)


def decline(line: str, echo: bool) -> int:
    """End this round as `line`'s fault, recording the refusal for the rounds torchrun still starts."""
    failure = failure_file()
    if failure is not None:
        record = failure.parent / RECORD_DIR
        record.mkdir(parents=True, exist_ok=True)
        write_once(record / DECLINED, line + "\n")  # the node's ranks write the same agreed line
        write_once(failure, line + "\n")
    if echo:
        log.error("No in-job restart: %s", line)
    token = FAULT_PATTERN.search(line)
    return EXIT_USER_ERROR if token and token.group(1) == USER else EXIT_INFRASTRUCTURE
