"""A team's model, optimizer and extra state saved and resumed through the profile's checkpoint store.

The same store, format and rules as train.py's (checkpoint.py): torch.distributed.checkpoint shards each
rank writes and reads itself (an S3 store is read per rank, no copy first), a COMPLETE marker written last
(a folder without it is never loaded), each rank's RNG state, the newest `--keep-checkpoints` kept, and a
run's own checkpoints before a resume source (`--resume-from`, the resume channel). The marker records the
model's parameter names and shapes: a checkpoint of another model is refused before it is read.
"""

from __future__ import annotations

import copy

import torch
from checkpoint import TrainState
from distributed import unwrap
from flags import resume_source
from model import identity
from torch.distributed.checkpoint.stateful import Stateful
from trainstack_runtime.job import Job


class Checkpoints:
    """`resume()` once before training, `save(step)` at `due(step)` and on a stop, `poll()` every step
    (async saves), `wait()` before the end."""

    def __init__(
        self,
        job: Job,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        extra: dict[str, Stateful] | None = None,
    ):
        """`extra`: objects with state_dict/load_state_dict (an LR scheduler, a sampler's position)."""
        self.job = job
        self.state = TrainState(model, optimizer, extra)
        # A load that fails half-way (a corrupt shard) must not leave a half-loaded model to train on or to
        # try the next checkpoint from: the initial state is kept, on the host.
        initial = {name: value.state_dict() for name, value in self.state.extra.items()}
        self._initial = copy.deepcopy({**initial, "model": model.state_dict()})
        self.manager = job.checkpoint_manager(identity(unwrap(model)), self._reset)

    def _reset(self) -> None:
        self.state.model.load_state_dict(self._initial["model"])
        self.state.optimizer.state.clear()
        for name, value in self.state.extra.items():
            value.load_state_dict(self._initial[name])
        self.state.step = 0

    def resume(self) -> int:
        """Load the newest complete checkpoint (the run's own, else the resume source's) and return its step;
        0 where there is none. A store holding checkpoints of which none loads is a UserError."""
        settings = self.job.settings
        resumed = self.manager.resume(self.state, settings.resume_from, resume_source(settings))
        self.job.resumed = resumed is not None
        return self.state.step

    def due(self, step: int) -> bool:
        """Whether step `step` (1-based, completed) is one the profile's checkpoint interval saves at."""
        return step % self.job.checkpoint_interval == 0

    def save(self, step: int, blocking: bool = False) -> None:
        """Save the state after step `step` on every rank (a collective); `blocking` (a SIGTERM, the end)
        returns once the checkpoint is complete, else it completes in the background with
        --async-checkpoint. The watchdog allows a save its longer bound."""
        self.state.step = step
        with self.job.extended("checkpoint save"):
            self.manager.save(self.state, {}, blocking=blocking)

    def poll(self) -> None:
        """Finish an async save whose writes are done; cheap."""
        self.manager.poll()

    def wait(self) -> None:
        """Finish any async save."""
        with self.job.extended("checkpoint save"):
            self.manager.wait()
