"""When a job's training made progress, read from its log lines in CloudWatch Logs: each event's timestamp
(FilterLogEvents' `timestamp`, milliseconds since the epoch) and the lines train.py writes on rank 0.

- `Training <model> on <N> ranks ...`: set-up (model, data, resumed checkpoint) is done, the loop starts.
- `step=N ...` (training_scripts.metrics): step N is done (every --log-interval steps, and validation).
- `checkpoint_step=N paused_seconds=S` (training_scripts.metrics): the loop stood still S seconds to save
  step N's checkpoint, logged when it goes on (async saves: the snapshot; blocking saves: the whole save).
- `Saved checkpoint .../step_<N>.` (training_scripts/checkpoint.py): step N's checkpoint is complete.

The timestamps are when SageMaker's log agent took the lines (assumed within seconds of the write: it
streams stdout while the job runs), so the ledger's splits inside a job are estimates at that grain.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from training_scripts.metrics import CHECKPOINT_PAUSE

STEP = re.compile(r"\bstep=(\d+)")
_READY = re.compile(r"\bTraining \S+ on \d+ ranks\b")
_SAVED = re.compile(r"Saved checkpoint \S*step_(\d+)\.")


@dataclass(frozen=True)
class Pause:
    """The training loop standing still for step `step`'s checkpoint."""

    step: int
    start: datetime
    end: datetime


@dataclass
class Progress:
    ready: datetime | None = None  # the loop started (first such line)
    steps: list[tuple[int, datetime]] = field(default_factory=list)  # (step, when logged), in log order
    pauses: list[Pause] = field(default_factory=list)
    saved: dict[int, datetime] = field(default_factory=dict)  # step -> when its checkpoint was complete

    def reached(self, step: int) -> datetime | None:
        """When the loop finished step `step`: its checkpoint pause began then, or its step line says."""
        for pause in self.pauses:
            if pause.step == step:
                return pause.start
        return next((when for logged, when in self.steps if logged == step), self.saved.get(step))


def read_progress(events: list[dict[str, Any]]) -> Progress:
    progress = Progress()
    for event in events:
        line, when = event["message"], datetime.fromtimestamp(event["timestamp"] / 1000, UTC)
        if progress.ready is None and _READY.search(line):
            progress.ready = when
        if pause := CHECKPOINT_PAUSE.search(line):
            seconds = float(pause.group(2))
            progress.pauses.append(Pause(int(pause.group(1)), when - timedelta(seconds=seconds), when))
        elif saved := _SAVED.search(line):
            progress.saved[int(saved.group(1))] = when
        elif step := STEP.search(line):
            progress.steps.append((int(step.group(1)), when))
    return progress
