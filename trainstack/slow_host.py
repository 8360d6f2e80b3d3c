"""A profile's `slow_host:` block: after how many log intervals train.py flags a slow host, and whether the
attempt then ends (`trainstack-fault:infrastructure:slow-host`, an infrastructure fault: the retry resumes
from the checkpoint on new instances). docs/training.md, "Slow hosts"; docs/faults.md."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from trainstack.base import StrictModel


class SlowHostPolicy(StrictModel):
    # train.py's own defaults (--slow-host-intervals 3, --end-on-slow-host false) apply without the block.
    intervals: Annotated[int, Field(ge=1, le=100)] = 3
    end_attempt: bool = False

    def hyperparameters(self) -> dict[str, Any]:
        """train.py's flags, before JSON encoding."""
        return {"slow_host_intervals": self.intervals, "end_on_slow_host": self.end_attempt}
