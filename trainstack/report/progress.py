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

import itertools
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

    def reached(self, step: int, first_step: int) -> datetime | None:
        """When the loop finished step `step` (the job started at `first_step`): when its checkpoint pause
        began, else at the pace of the logged steps, between them or after the last (the last lines of a
        job stopped with SIGTERM can be lost with the process that relayed them). None: `step` is not
        after `first_step`, or nothing was logged."""
        if step <= first_step:
            return None
        for pause in self.pauses:
            if pause.step == step:
                return pause.start
        points = [(first_step, self.ready)] if self.ready else []
        for logged, when in self.steps:
            if logged > (points[-1][0] if points else first_step):
                points.append((logged, when))
        if not points:
            return None
        if len(points) == 1:
            return points[0][1]
        pairs = list(itertools.pairwise(points))
        (low, since), (high, until) = next((pair for pair in pairs if step <= pair[1][0]), pairs[-1])
        return since + (until - since) * ((step - low) / (high - low))


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
