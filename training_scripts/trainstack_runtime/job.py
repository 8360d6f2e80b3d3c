"""A training process's life on the platform: `run(train)` around a team's training function.

`run` does, in order, what every round of a job needs before and after the team's code: it sets the last
round's failure aside and ends that round's MLflow run (in-job restarts), reads the platform's flags and
the team's hyperparameters, starts torch.distributed, refuses a restart the last fault rules out, hands
a `Job` to `train`, and turns whatever ends it into the product's fault line and exit code
(faults.py): 0, EXIT_USER_ERROR (2) for a UserError, EXIT_INFRASTRUCTURE (75) for an agreed
infrastructure stop, the exception itself otherwise.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from capacity_block import STOP_PLAN_ENDING, STOP_SIGTERM, CapacityBlock, PlanEndingError
from checkpoint import CheckpointManager
from data import UserError
from distributed import Runtime, reduce_max, settle, setup, teardown
from faults import EXIT_INFRASTRUCTURE, EXIT_USER_ERROR, REPORT_LISTENERS, classify, report
from flags import parse_platform_args
from in_job_restart import begin_round, decline, refused_restart, restart_round, round_record
from metrics import configure_logging
from mlflow_log import RUN_RECORD, MlflowLog, end_interrupted_run
from rank_health import SlowHostError
from tensorboard_scalars import Scalars
from watchdog import Bounds, Watchdog, hang_if_injected

log = logging.getLogger("train")


class Job:
    """What a training function gets from `run`: the process group, the job's settings, the channels and
    hyperparameters, the watchdog, the stop signals, and the checkpoint store and metric sinks."""

    def __init__(
        self,
        settings: argparse.Namespace,
        hyperparameters: dict[str, str],
        runtime: Runtime,
        watchdog: Watchdog,
    ):
        self.settings, self.hyperparameters = settings, hyperparameters
        self.runtime, self.watchdog = runtime, watchdog
        self.resumed = False  # whether a checkpoint was loaded (Checkpoints.resume): the hang drill reads it
        # StopTrainingJob, Spot reclaims and queue preemptions send SIGTERM about two minutes before the
        # kill. The handler holds an event, not the job, so the model is freed before the process group.
        sigterm = self.sigterm = threading.Event()
        signal.signal(signal.SIGTERM, lambda signum, frame: sigterm.set())
        self.capacity_block = CapacityBlock.from_environment(settings)  # a training plan's end

    @property
    def rank(self) -> int:
        return self.runtime.rank

    @property
    def world_size(self) -> int:
        return self.runtime.world_size

    @property
    def device(self) -> torch.device:
        return self.runtime.device

    @property
    def is_main(self) -> bool:
        return self.runtime.is_main

    @property
    def model_dir(self) -> Path:
        """Where the final model goes (SM_MODEL_DIR): SageMaker uploads it as the run's model."""
        return Path(self.settings.model_dir)

    @property
    def checkpoint_interval(self) -> int:
        """Steps between checkpoints, as the profile sets it (`checkpoint_interval`, solved by `auto`)."""
        return self.settings.checkpoint_interval

    def channel(self, name: str) -> Path:
        """The directory of input channel `name` (SM_CHANNEL_<NAME>); a UserError where it is not attached."""
        variable = f"SM_CHANNEL_{name.upper()}"
        if not os.environ.get(variable):
            raise UserError(f"No {name!r} channel: attach a channel named {name!r} ({variable} is not set).")
        return Path(os.environ[variable])

    def hyperparameter(self, name: str, default: Any, kind: Callable[[str], Any] = str) -> Any:
        """The team's hyperparameter `name` as `kind` (its text as SageMaker passed it), else `default`."""
        if name not in self.hyperparameters:
            return default
        try:
            return kind(self.hyperparameters[name])
        except ValueError:
            raise UserError(
                f"Hyperparameter {name}: expected {getattr(kind, '__name__', kind)}, got "
                f"{self.hyperparameters[name]!r}."
            ) from None

    def start_watchdog(self) -> None:
        """Watch for ranks that stop stepping from now on (once the model is built and the data open):
        call `step_completed` after every optimizer step and wrap long non-step work in `extended`."""
        if self.settings.watchdog:
            self.watchdog.start()

    def step_completed(self, step: int) -> None:
        """After optimizer step `step` (1-based) and its checkpoint, if any: the watchdog's sign of
        progress. The fault drills' hang (--inject-hang-at-step, a testing aid) stops before the next."""
        self.watchdog.step_completed(step)
        hang_if_injected(self.settings, self.rank, step + 1, self.resumed)

    def extended(self, activity: str):
        """A context in which no step completes by design (a save, a validation, an export): the
        watchdog's longer bound (--watchdog-save-seconds) holds."""
        return self.watchdog.extended(activity)

    def stop_reason(self, own: int = 0) -> int:
        """Why every rank stops after this step, as any rank has it: 0 (none), STOP_SIGTERM or
        STOP_PLAN_ENDING; `own` adds a flag of the caller's. One small collective: call it at the same step
        on every rank."""
        return int(reduce_max(self.runtime, torch.tensor([self.own_stop(), own]))[0])

    def own_stop(self) -> int:
        """This rank's own stop (no collective): for scripts that agree on it with flags of their own."""
        return STOP_PLAN_ENDING if self.capacity_block.ending() else STOP_SIGTERM * self.sigterm.is_set()

    def end_for_plan(self, step: int) -> PlanEndingError:
        """The error a training function raises after its checkpoint when the stop was STOP_PLAN_ENDING."""
        return self.capacity_block.error(step)

    def checkpoint_manager(self, identity: dict, reset: Callable[[], None]) -> CheckpointManager:
        """The profile's checkpoint store (--checkpoint-dir: a synced directory, FSx or an S3 prefix)."""
        settings = self.settings
        return CheckpointManager(
            settings.checkpoint_dir,
            self.runtime,
            settings.keep_checkpoints,
            settings.async_checkpoint,
            identity,
            reset,
            shared=settings.checkpoint_dir_shared,
        )

    def scalars(self, parameters: dict[str, Any]) -> Scalars:
        """Rank 0's metric sinks: TensorBoard event files (--tensorboard-dir) and this round's MLflow run
        with `parameters`; other ranks get one that does nothing. Close it when training ends."""
        mlflow_run = MlflowLog(self.is_main, parameters, round_record(restart_round(), RUN_RECORD))
        # A fault this round reports ends the run FAILED at once: a round may have no round after it.
        REPORT_LISTENERS.append(mlflow_run.fail)
        return Scalars(self.settings.tensorboard_dir if self.is_main else None, mlflow_run)


def run(
    train: Callable[[Job], None],
    argv: list[str] | None = None,
    parse: Callable[[list[str]], tuple[argparse.Namespace, dict[str, str]]] = parse_platform_args,
) -> int:
    """Run `train(job)` as one round of a training job (module docstring) and return the exit code.

    `argv` defaults to sys.argv[1:]; `parse` turns it into (the platform's settings, the team's
    hyperparameters) and may raise UserError: train.py passes its own parser, a superset of the platform's
    flags."""
    restarted = begin_round()  # first: nothing this round reports may be set aside (in_job_restart.py)
    rank = int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    configure_logging(rank)
    if restarted and rank == 0:  # the killed round's MLflow run ends FAILED, whether this round trains or not
        end_interrupted_run(round_record(restarted.number - 1, RUN_RECORD), restarted.previous_fault)
    if restarted and restarted.declined:  # an earlier round refused the restart: no collective, no training
        return decline(restarted.declined, echo=True)  # every rank: no collective orders the exits (below)
    try:  # flags are checked alike on every rank, before any process group: each rank reports
        settings, hyperparameters = parse(sys.argv[1:] if argv is None else argv)
    except UserError as error:
        # No collective orders the exits here: the launcher ends every other rank as soon as the first one
        # exits, so rank 0 alone would lose its line whenever another rank is faster.
        report(*classify(error))
        return EXIT_USER_ERROR
    timeout = timedelta(seconds=settings.collective_timeout_seconds)
    runtime = setup(settings.strategy, settings.mp_parameters, timeout)
    watchdog = Watchdog(Bounds.from_args(settings), runtime.rank)
    try:
        refused = refused_restart(runtime, restarted)
        if refused is not None:
            settle(runtime)
            return refused
        train(Job(settings, hyperparameters, runtime, watchdog))
        settle(runtime)
    except UserError as error:  # every rank raises the same one (distributed.agree, collectives)
        report(*classify(error), echo=rank == 0)
        settle(runtime)
        return EXIT_USER_ERROR
    except (SlowHostError, PlanEndingError) as error:  # every rank ends the attempt alike: rank 0 reports
        report(error.fault, str(error), echo=rank == 0)
        settle(runtime)
        return EXIT_INFRASTRUCTURE
    except Exception as error:  # this rank's own: its traceback follows, as before
        report(*classify(error))
        raise
    finally:
        teardown()
        watchdog.stop()  # only now: a teardown blocked by a dead peer ends as a hang too
    return 0
