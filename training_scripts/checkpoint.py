"""Sharded, atomic, resumable checkpoints with torch.distributed.checkpoint (DCP).

Layout under the checkpoint dir (SageMaker syncs /opt/ml/checkpoints with S3):

    step_000000100/           one folder per step: DCP shards + .metadata,
        rng/rank_<r>.pt       each rank's RNG state,
        COMPLETE              written last; a folder without it is ignored.
    step_000000200.tmp/       a save in progress (renamed when every rank is done)

Each node renames and marks its own copy, so this works both with node-local
dirs (SageMaker, one per instance) and with one shared filesystem.

A new run can start from another run's checkpoints (`resume(state, source)`):
`source` has the same layout and is only read.
"""

import json
import logging
import os
import shutil
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from distributed import Runtime
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful

MARKER = "COMPLETE"
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
    """Complete checkpoint folders in `directory`, newest first; none if it does not exist."""
    if not directory.is_dir():
        return []
    folders = [p for p in directory.glob("step_*") if p.suffix != ".tmp" and (p / MARKER).is_file()]
    return sorted(folders, reverse=True)


class CheckpointManager:
    def __init__(self, directory: str, runtime: Runtime, keep_last: int, async_save: bool):
        self.directory, self.runtime = Path(directory), runtime
        self.keep_last, self.async_save = keep_last, async_save
        self._pending: tuple[int, object] | None = None  # (step, future) of an async save in flight

    def folder(self, step: int) -> Path:
        return self.directory / f"step_{step:09d}"

    def resume(self, state: TrainState, source: str | None = None) -> bool:
        """Continue this run from its own newest checkpoint that loads; without one, from `source`'s.

        A retry of a run that started from `source` must continue its own progress, so this
        run's checkpoints win. Returns whether a checkpoint was loaded.
        """
        if self.runtime.local_rank == 0:  # saves a killed run left unfinished; no rank saves before a barrier
            for unfinished in self.directory.glob("step_*.tmp"):
                shutil.rmtree(unfinished, ignore_errors=True)
        if self._load_newest(self.directory, state):
            if source is not None:
                log.info("This run has its own checkpoints: the resume source %s is ignored.", source)
            return True
        return source is not None and self._load_newest(Path(source), state)

    def _load_newest(self, directory: Path, state: TrainState) -> bool:
        """Load the newest checkpoint in `directory` that loads; skip partial or corrupt ones (warning)."""
        for folder in complete_checkpoints(directory):
            try:
                dcp.load({"train": state}, checkpoint_id=folder, process_group=self.runtime.checkpoint_group)
            # DCP gathers failures and raises on every rank alike, so all ranks skip together.
            except (Exception, CheckpointException) as error:  # CheckpointException is a BaseException
                reason = (
                    str(error).strip().splitlines()[-1][:300] if str(error).strip() else type(error).__name__
                )
                log.warning(
                    "Checkpoint %s could not be loaded (%s); trying the previous one.", folder, reason
                )
                continue
            self._restore_rng(folder)
            saved_world = json.loads((folder / MARKER).read_text()).get("world_size")
            if saved_world != self.runtime.world_size:
                log.warning(
                    "Checkpoint %s was written by %s ranks, this run has %s: training continues, "
                    "but the data order differs from an uninterrupted run.",
                    folder,
                    saved_world,
                    self.runtime.world_size,
                )
            log.info("Resumed from %s (step %d).", folder, state.step)
            return True
        return False

    def save(self, state: TrainState, blocking: bool = False) -> None:
        """Save `state` at its step; `blocking` (SIGTERM) returns only once the checkpoint is complete."""
        self.wait()
        step = state.step
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
                snapshot, checkpoint_id=staging, process_group=self.runtime.checkpoint_group
            )
            self._pending = (step, future)
        else:
            dcp.save({"train": state}, checkpoint_id=staging, process_group=self.runtime.checkpoint_group)
            self._finalize(step)

    def poll(self) -> None:
        """Finish an async save whose writes are done; cheap, called every step."""
        if self._pending and self._pending[1].done():
            self.wait()

    def wait(self) -> None:
        if self._pending:
            step, future = self._pending
            self._pending = None
            future.result()
            self._finalize(step)

    def _finalize(self, step: int) -> None:
        # dcp.save/async_save complete on a rank only after the coordinator wrote .metadata, which it
        # does after every rank's shards are written: no further barrier is needed.
        if self.runtime.local_rank != 0:
            return
        final = self.folder(step)
        try:
            os.rename(final.with_suffix(".tmp"), final)
        except FileNotFoundError:  # another node on a shared filesystem renamed it first
            pass
        marker = {"step": step, "world_size": self.runtime.world_size}
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

    def _restore_rng(self, folder: Path) -> None:
        path = folder / "rng" / f"rank_{self.runtime.rank}.pt"
        if not path.is_file():
            return  # a different world size wrote it: keep this rank's seeded state
        rng = torch.load(path, weights_only=True)
        torch.set_rng_state(rng["cpu"])
        if "cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state(rng["cuda"])


def _clone_host_tensors(tree):
    if isinstance(tree, dict):
        return {key: _clone_host_tensors(value) for key, value in tree.items()}
    if isinstance(tree, list):
        return [_clone_host_tensors(value) for value in tree]
    if isinstance(tree, torch.Tensor) and tree.device.type == "cpu":
        return tree.detach().clone()
    return tree
