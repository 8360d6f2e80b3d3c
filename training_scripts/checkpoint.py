"""Sharded, atomic, resumable checkpoints with torch.distributed.checkpoint (DCP).

Layout under the checkpoint dir (SageMaker syncs /opt/ml/checkpoints with S3):

    step_000000100/           one folder per step: DCP shards + .metadata,
        rng/rank_<r>.pt       each rank's RNG state,
        COMPLETE              written last; a folder without it is ignored.
    step_000000200.tmp/       a save in progress (renamed when every rank is done)

Each node renames and marks its own copy, so this works both with node-local
dirs (SageMaker, one per instance) and with one shared filesystem.

A new run can start from another run's checkpoints (`resume(state, source, ...)`):
`source` has the same layout and is only read.

The marker (JSON) records the step, the data-parallel size, the global batch, the
data position and the model's identity: a checkpoint of another model is refused
before it is read, and a resume with another number of ranks keeps the batch.
"""

import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from checkpoint_layout import MARKER, folder_name
from data import UserError
from distributed import Runtime, agree
from metrics import format_checkpoint_pause_line
from model import describe
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful

# Threads each rank writes its shards with (DCP's default is 1). benchmarks/checkpoint_throughput.py, on a
# shared 2-core VM: DCP/raw 0.53-0.83 with 1 thread, 0.60-1.01 with 4 (docs/training.md); measure there.
WRITE_THREADS = 4
log = logging.getLogger(__name__)


class TrainState(Stateful):
    """Everything a resumed run needs: weights, optimizer moments and the step.

    The learning rate and the data order are pure functions of the step, so the
    step is the scheduler's and the data loader's whole state.
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        self.model, self.optimizer, self.step = model, optimizer, 0

    def state_dict(self) -> dict:
        model_state, optimizer_state = get_state_dict(self.model, self.optimizer)
        return {"model": model_state, "optimizer": optimizer_state, "step": self.step}

    def load_state_dict(self, state: dict) -> None:
        set_state_dict(
            self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
        )
        self.step = state["step"]


def complete_checkpoints(directory: Path) -> list[Path]:
    """Checkpoint folders in `directory` whose save finished (a COMPLETE marker), newest first."""
    if not directory.is_dir():
        return []
    folders = [p for p in directory.glob("step_*") if p.suffix != ".tmp" and (p / MARKER).is_file()]
    return sorted(folders, reverse=True)


@dataclass
class Resumed:
    """What the loaded checkpoint's marker says about the run that wrote it."""

    folder: Path
    step: int
    dp_size: int | None  # None: written before markers recorded it
    global_batch: int | None
    data_position: tuple[int, int] | None  # (epoch, offset) of the next sample to read


class CheckpointManager:
    def __init__(
        self,
        directory: str,
        runtime: Runtime,
        keep_last: int,
        async_save: bool,
        model_identity: dict,
        reset: Callable[[], None],
    ):
        """`model_identity` goes into every marker and must match on load; `reset` returns the
        train state to the fresh one after a load that failed half-way."""
        self.directory, self.runtime = Path(directory), runtime
        self.keep_last, self.async_save = keep_last, async_save
        self.model_identity, self.reset = model_identity, reset
        self._pending: tuple[int, dict, object] | None = None  # (step, marker, future) of an async save

    def folder(self, step: int) -> Path:
        return self.directory / folder_name(step)

    def resume(self, state: TrainState, source: str | None, source_name: str) -> Resumed | None:
        """Continue this run from its own newest checkpoint that loads; without one, from `source`'s.

        A retry of a run that started from `source` must continue its own progress, so this run's
        checkpoints win. If the checkpoint dir holds checkpoints and none loads, training would start
        over and then overwrite and prune them: stop instead (UserError naming each and why), with
        nothing touched. `source_name` names `source` in errors.
        """
        own = complete_checkpoints(self.directory)
        if own:
            resumed = self._load_newest(own, state, f"--checkpoint-dir {self.directory}", "move them away")
            if source is not None:
                log.info("This run has its own checkpoints: the resume source %s is ignored.", source)
        elif source is not None:
            resumed = self._load_newest(
                complete_checkpoints(Path(source)), state, source_name, "choose another"
            )
        else:
            resumed = None
        if self.runtime.local_rank == 0:  # saves a killed run left unfinished; no rank saves before a barrier
            for unfinished in self.directory.glob("step_*.tmp"):
                shutil.rmtree(unfinished, ignore_errors=True)
        return resumed

    def _load_newest(self, folders: list[Path], state: TrainState, where: str, remedy: str) -> Resumed:
        """Load the newest of `folders` that loads; skip broken ones (warning); raise if none loads."""
        failures = []
        for folder in folders:
            reason = self._try_load(folder, state)
            if reason is None:
                return self._resumed(folder, state)
            failures.append(f"{folder.name} ({reason})")
            self.reset()  # never continue from, or train on, a half-loaded state
            if self.runtime.is_main:  # every rank found the same
                log.warning("Checkpoint %s could not be loaded (%s).", folder, reason)
        raise UserError(
            f"{where} holds {len(folders)} checkpoint(s) and none loads, so training stops rather than start "
            f"over and replace them: {'; '.join(failures)}; this run's model is "
            f"{describe(self.model_identity)} ({remedy} to start fresh)."
        )

    def _try_load(self, folder: Path, state: TrainState) -> str | None:
        """Why `folder` does not load into `state` (the same on every rank), or None once it has loaded."""
        rng_path = folder / "rng" / f"rank_{self.runtime.rank}.pt"
        self._rng = None
        try:
            marker = json.loads((folder / MARKER).read_text())
            if not isinstance(marker, dict) or not isinstance(marker.get("step"), int):
                raise ValueError
        except (OSError, ValueError):
            problem = f"its {MARKER} marker is empty or unreadable"
        else:
            saved_model = marker.get("model")
            problem = None
            if (
                saved_model is not None
                and saved_model.get("fingerprint") != self.model_identity["fingerprint"]
            ):
                problem = f"it holds another model: {describe(saved_model)}"
        if problem is None and rng_path.is_file():  # absent: another world size wrote it
            try:
                self._rng = torch.load(rng_path, weights_only=True)
            except Exception as error:  # truncated or corrupt: any unpickling error
                problem = f"{rng_path.relative_to(folder)} is unreadable: {_last_line(error)}"
        problem = agree(self.runtime, problem)
        if problem:
            return problem
        try:
            dcp.load({"train": state}, checkpoint_id=folder, process_group=self.runtime.checkpoint_group)
        # DCP gathers failures and raises on every rank alike, so all ranks skip together.
        except (Exception, CheckpointException) as error:  # CheckpointException is a BaseException
            return _last_line(error)
        return None

    def _resumed(self, folder: Path, state: TrainState) -> Resumed:
        if self._rng is not None:
            torch.set_rng_state(self._rng["cpu"])
            if "cuda" in self._rng and torch.cuda.is_available():
                torch.cuda.set_rng_state(self._rng["cuda"])
        marker = json.loads((folder / MARKER).read_text())
        position = marker.get("data_position")
        log.info("Resumed from %s (step %d).", folder, state.step)
        return Resumed(
            folder=folder,
            step=state.step,
            dp_size=marker.get("dp_size"),
            global_batch=marker.get("global_batch"),
            data_position=tuple(position) if position else None,
        )

    def save(self, state: TrainState, run_facts: dict, blocking: bool = False) -> None:
        """Save `state` at its step; `run_facts` (global batch, data position) go into the marker;
        `blocking` (SIGTERM) returns only once the checkpoint is complete."""
        paused = time.perf_counter()
        self.wait()
        step = state.step
        marker = {
            "step": step,
            "world_size": self.runtime.world_size,
            "dp_size": self.runtime.dp_size,
            "model": self.model_identity,
            **run_facts,
        }
        staging = self.folder(step).with_suffix(".tmp")
        if self.runtime.local_rank == 0:  # leftovers of a killed attempt at this same step
            shutil.rmtree(staging, ignore_errors=True)
            shutil.rmtree(self.folder(step), ignore_errors=True)
        dist.barrier(group=self.runtime.checkpoint_group)
        self._save_rng(staging)
        if self.async_save and not blocking:
            # DCP copies GPU tensors to host before returning; host tensors would be written while
            # the next steps update them in place, so snapshot them first.
            snapshot = _clone_host_tensors({"train": state.state_dict()})
            future = dcp.async_save(
                snapshot, storage_writer=self._writer(staging), process_group=self.runtime.checkpoint_group
            )
            self._pending = (step, marker, future)
        else:
            dcp.save(
                {"train": state},
                storage_writer=self._writer(staging),
                process_group=self.runtime.checkpoint_group,
            )
            self._finalize(step, marker)
        if self.runtime.is_main:
            log.info(format_checkpoint_pause_line(step, time.perf_counter() - paused))

    @staticmethod
    def _writer(folder: Path) -> FileSystemWriter:
        return FileSystemWriter(folder, thread_count=WRITE_THREADS)

    def poll(self) -> None:
        """Finish an async save whose writes are done; cheap, called every step."""
        if self._pending and self._pending[2].done():
            self.wait()

    def wait(self) -> None:
        if self._pending:
            step, marker, future = self._pending
            self._pending = None
            future.result()
            self._finalize(step, marker)

    def _finalize(self, step: int, marker: dict) -> None:
        # dcp.save/async_save complete on a rank only after the coordinator wrote .metadata, which it
        # does after every rank's shards are written: no further barrier is needed.
        if self.runtime.local_rank != 0:
            return
        final = self.folder(step)
        try:
            os.rename(final.with_suffix(".tmp"), final)
        except FileNotFoundError:  # another node on a shared filesystem renamed it first
            pass
        (final / f"{MARKER}.tmp").write_text(json.dumps(marker))
        os.replace(final / f"{MARKER}.tmp", final / MARKER)
        for old in complete_checkpoints(self.directory)[self.keep_last :]:
            shutil.rmtree(old, ignore_errors=True)
        if self.runtime.is_main:
            log.info("Saved checkpoint %s.", final)

    def _save_rng(self, folder: Path) -> None:
        (folder / "rng").mkdir(parents=True, exist_ok=True)
        rng = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state()
        torch.save(rng, folder / "rng" / f"rank_{self.runtime.rank}.pt")


def _last_line(error: BaseException) -> str:
    """The gist of an error: the first sentence of its last line (DCP wraps each rank's traceback)."""
    text = str(error).strip()
    if not text:
        return type(error).__name__
    return text.splitlines()[-1].split(". ")[0].rstrip(".")[:200]


def _clone_host_tensors(tree):
    if isinstance(tree, dict):
        return {key: _clone_host_tensors(value) for key, value in tree.items()}
    if isinstance(tree, list):
        return [_clone_host_tensors(value) for value in tree]
    if isinstance(tree, torch.Tensor) and tree.device.type == "cpu":
        return tree.detach().clone()
    return tree
