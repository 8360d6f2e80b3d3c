"""Monte-Carlo check of the goodput model: a run trained under exponential failures, each attempt booked
as the goodput ledger books it (trainstack/report/goodput.py: starting, kept training, checkpoint saving,
lost work; its RunLedger computes the goodput). benchmarks/goodput_sim.py compares intervals with it and
tests/plan/test_goodput.py holds its mean to planning/goodput_model.py's formula.

One attempt: `restart` billed seconds of starting (failure-free, as the formula takes it), then training
from the last completed checkpoint, a save of `save` seconds after every `interval` steps of `step` seconds
(none after the run's last step, as train.py saves only below max_steps); the first failure, drawn from an
exponential distribution with mean `mtbf` from the start of training, ends it. What it trained after its
last completed save is lost work; the next attempt resumes from that save.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from trainstack.report.goodput import KEPT, LOST, PARTS, SAVING, STARTING, AttemptLedger, RunLedger


@dataclass(frozen=True)
class Scenario:
    step: float  # seconds per training step
    save: float  # blocking seconds per save
    restart: float  # billed seconds of each attempt's start
    mtbf: float  # the job's mean time between failures, seconds
    work: float  # seconds of training the run needs


def simulate(scenario: Scenario, interval: int, seed: int) -> RunLedger:
    """The ledger of one simulated run checkpointing every `interval` steps."""
    draw = random.Random(seed)
    segment = interval * scenario.step
    span = segment + scenario.save
    remaining = scenario.work
    attempts = []
    while remaining > 0:
        failure = draw.expovariate(1 / scenario.mtbf)
        segments_left = math.ceil(remaining / segment - 1e-9)
        done = math.floor(failure / span)
        parts = dict.fromkeys(PARTS, 0.0)
        parts[STARTING] = scenario.restart
        if failure >= remaining + (segments_left - 1) * scenario.save:  # the run ends first
            parts[KEPT] = remaining
            parts[SAVING] = (segments_left - 1) * scenario.save
            remaining = 0.0
        else:
            parts[KEPT] = done * segment
            parts[SAVING] = done * scenario.save
            parts[LOST] = failure - done * span
            remaining -= done * segment
        attempts.append(_attempt(len(attempts) + 1, parts))
    return RunLedger(attempts, backoff_seconds=0.0)


def _attempt(number: int, seconds: dict[str, float]) -> AttemptLedger:
    parts_ms = {part: round(1000 * value) for part, value in seconds.items()}
    return AttemptLedger(
        number=number,
        instance_count=1,
        hourly_usd=None,
        billed_ms=sum(parts_ms.values()),
        parts_ms=parts_ms,
        waiting_seconds=0.0,
        restarted=number > 1,
    )
