"""`--profile-steps`: a torch profiler trace of a window of training steps (docs/training.md)."""

import contextlib
import logging
from pathlib import Path

import torch
from distributed import Runtime

log = logging.getLogger("train")


class StepProfiler:
    """A torch profiler trace of the steps in `steps` (1-based), one file per rank in `directory`."""

    def __init__(self, steps: range | None, directory: str, runtime: Runtime):
        self.steps, self.directory, self.runtime, self._profile = steps, Path(directory), runtime, None

    @contextlib.contextmanager
    def step(self, step: int):
        if self.steps and step == self.steps.start:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if self.runtime.device.type == "cuda":
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self._profile = torch.profiler.profile(activities=activities, record_shapes=True)
            self._profile.__enter__()
        yield
        if self._profile and step == self.steps[-1]:
            self._profile.__exit__(None, None, None)
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.directory / f"trace_steps_{self.steps.start}-{step}_rank_{self.runtime.rank}.json"
            self._profile.export_chrome_trace(str(path))
            self._profile = None
            if self.runtime.is_main:
                log.info("Wrote the profiler trace of steps %d-%d to %s.", self.steps.start, step, path)
