"""Sharded, atomic, resumable checkpoints with torch.distributed.checkpoint (DCP).

Layout under the checkpoint dir (a directory SageMaker syncs with S3, a shared FSx directory, or an S3
prefix that DCP reads and writes directly: checkpoint_storage.py):

    step_000000100/           one folder per step: DCP shards + .metadata,
        rng/rank_<r>.pt       each rank's RNG state,
        COMPLETE              written last; a folder without it is ignored.
    step_000000200.tmp/       a save in progress (renamed when every rank is done; S3 writes in place)

With node-local dirs (SageMaker's sync, one per instance) each node renames and marks its own copy; with
a store every node shares (FSx, S3) rank 0 alone does.

A new run can start from another run's checkpoints (`resume(state, source, ...)`):
`source` has the same layout and is only read.

The marker (JSON) records the step, the data-parallel size, the global batch, the
data position and the model's identity: a checkpoint of another model is refused
before it is read, and a resume with another number of ranks keeps the batch.
"""

import io
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from checkpoint_layout import MARKER, folder_name
from checkpoint_storage import IN_PROGRESS, Storage, checkpoints_at, complete_folders, counted, open_storage
from data import UserError
from distributed import Runtime, agree
from metrics import format_checkpoint_pause_line
from model import describe
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful

log = logging.getLogger(__name__)


class TrainState(Stateful):
    """Everything a resumed run needs: weights, optimizer moments and the step, plus any `extra` objects
    with state_dict/load_state_dict (a scheduler, a data loader's position) by name.

    train.py's learning rate and data order are pure functions of the step, so the
    step is its scheduler's and data loader's whole state (no extra).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        extra: dict[str, Stateful] | None = None,
    ):
        self.model, self.optimizer, self.step = model, optimizer, 0
        self.extra = extra or {}

    def state_dict(self) -> dict:
        model_state, optimizer_state = get_state_dict(self.model, self.optimizer)
        state = {"model": model_state, "optimizer": optimizer_state, "step": self.step}
        if self.extra:
            state["extra"] = {name: value.state_dict() for name, value in self.extra.items()}
        return state

    def load_state_dict(self, state: dict) -> None:
        set_state_dict(
            self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
        )
        self.step = state["step"]
        for name, value in self.extra.items():
            value.load_state_dict(state["extra"][name])


@dataclass
class Resumed:
    """What the loaded checkpoint's marker says about the run that wrote it."""

    folder: str  # where it lies: a path or an s3:// URI
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
        shared: bool = False,
    ):
        """`directory`: a path or an s3:// prefix, `shared` by every node (a path on FSx; S3 always is);
        `model_identity` goes into every marker and must match on load; `reset` returns the train state to
        the fresh one after a load that failed half-way."""
        self.storage, self.runtime = open_storage(directory, shared), runtime
        # Who renames, marks and prunes: each node its own copy, or rank 0 the one every node shares.
        self.finalizes = runtime.is_main if self.storage.shared else runtime.local_rank == 0
        self.keep_last, self.async_save = keep_last, async_save
        self.model_identity, self.reset = model_identity, reset
        self._pending: tuple[int, dict, object] | None = None  # (step, marker, future) of an async save

    def resume(self, state: TrainState, source: str | None, source_name: str) -> Resumed | None:
        """Continue this run from its own newest checkpoint that loads; without one, from `source`'s.

        A retry of a run that started from `source` must continue its own progress, so this run's
        checkpoints win. If the checkpoint dir holds checkpoints and none loads, training would start
        over and then overwrite and prune them: stop instead (UserError naming each and why), with
        nothing touched. `source_name` names `source` in errors.
        """
        own = complete_folders(self.storage)
        if own:
            resumed = self._load_newest(
                self.storage, own, state, f"--checkpoint-dir {self.storage}", "move them away"
            )
            if source is not None:
                log.info("This run has its own checkpoints: the resume source %s is ignored.", source)
        elif source is not None:
            origin, folders = checkpoints_at(source)
            resumed = self._load_newest(origin, folders, state, source_name, "choose another")
        else:
            resumed = None
        if self.finalizes:  # saves a killed run left unfinished; no rank saves before a barrier
            for unfinished in set(self.storage.folders()) - set(own):
                self.storage.remove(unfinished)
        return resumed

    def _load_newest(
        self, storage: Storage, folders: list[str], state: TrainState, where: str, remedy: str
    ) -> Resumed:
        """Load the newest of `folders` that loads; skip broken ones (warning); raise if none loads."""
        failures = []
        for folder in folders:
            reason = self._try_load(storage, folder, state)
            if reason is None:
                return self._resumed(storage, folder, state)
            failures.append(f"{folder} ({reason})")
            self.reset()  # never continue from, or train on, a half-loaded state
            if self.runtime.is_main:  # every rank found the same
                log.warning("Checkpoint %s could not be loaded (%s).", storage.path(folder), reason)
        raise UserError(
            f"{where} holds {len(folders)} checkpoint(s) and none loads, so training stops rather than start "
            f"over and replace them: {'; '.join(failures)}; this run's model is "
            f"{describe(self.model_identity)} ({remedy} to start fresh)."
        )

    def _try_load(self, storage: Storage, folder: str, state: TrainState) -> str | None:
        """Why `folder` does not load into `state` (the same on every rank), or None once it has loaded."""
        rng_name = f"rng/rank_{self.runtime.rank}.pt"
        self._rng = None
        try:
            marker = json.loads(storage.read(folder, MARKER))
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
        if problem is None and storage.has(folder, rng_name):  # absent: another world size wrote it
            try:
                self._rng = torch.load(io.BytesIO(storage.read(folder, rng_name)), weights_only=True)
            except Exception as error:  # truncated or corrupt: any unpickling error
                problem = f"{rng_name} is unreadable: {_last_line(error)}"
        problem = agree(self.runtime, problem)
        if problem:
            return problem
        reader, self._read_bytes = counted(storage.reader(folder))
        started = time.perf_counter()
        try:
            dcp.load({"train": state}, storage_reader=reader, process_group=self.runtime.checkpoint_group)
        # DCP gathers failures and raises on every rank alike, so all ranks skip together.
        except (Exception, CheckpointException) as error:  # CheckpointException is a BaseException
            return _last_line(error)
        self._read_seconds = time.perf_counter() - started
        return None

    def _resumed(self, storage: Storage, folder: str, state: TrainState) -> Resumed:
        if self._rng is not None:
            torch.set_rng_state(self._rng["cpu"])
            if "cuda" in self._rng and torch.cuda.is_available():
                torch.cuda.set_rng_state(self._rng["cuda"])
        marker = json.loads(storage.read(folder, MARKER))
        position = marker.get("data_position")
        log.info("Resumed from %s (step %d).", storage.path(folder), state.step)
        # Each rank's share of the restart (a store read directly moves only the rank's own shards); every
        # rank prints it, as the dry run's memory lines (only rank 0 logs INFO).
        print(
            f"checkpoint_read rank={self.runtime.rank} bytes={self._read_bytes[0]} "
            f"seconds={self._read_seconds:.3f}",
            flush=True,
        )
        return Resumed(
            folder=storage.path(folder),
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
        final = folder_name(step)
        staging = f"{final}{IN_PROGRESS}" if self.storage.stages else final
        if self.finalizes:  # leftovers of a killed attempt at this same step
            self.storage.remove(staging)
            self.storage.remove(final)
        dist.barrier(group=self.runtime.checkpoint_group)
        self._save_rng(staging)
        if self.async_save and not blocking:
            # DCP copies GPU tensors to host before returning; host tensors would be written while
            # the next steps update them in place, so snapshot them first.
            snapshot = _clone_host_tensors({"train": state.state_dict()})
            future = dcp.async_save(
                snapshot,
                storage_writer=self.storage.writer(staging),
                process_group=self.runtime.checkpoint_group,
            )
            self._pending = (step, marker, future)
        else:
            dcp.save(
                {"train": state},
                storage_writer=self.storage.writer(staging),
                process_group=self.runtime.checkpoint_group,
            )
            self._finalize(step, marker)
        if self.runtime.is_main:
            log.info(format_checkpoint_pause_line(step, time.perf_counter() - paused))

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
        if not self.finalizes:
            return
        final = folder_name(step)
        if self.storage.stages:
            self.storage.commit(f"{final}{IN_PROGRESS}", final)
        self.storage.write(final, MARKER, json.dumps(marker).encode())
        for old in complete_folders(self.storage)[self.keep_last :]:
            self.storage.remove(old)
        if self.runtime.is_main:
            log.info("Saved checkpoint %s.", self.storage.path(final))

    def _save_rng(self, folder: str) -> None:
        rng = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state()
        buffer = io.BytesIO()
        torch.save(rng, buffer)
        self.storage.write(folder, f"rng/rank_{self.runtime.rank}.pt", buffer.getvalue())


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
