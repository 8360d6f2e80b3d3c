"""Monte-Carlo check of the goodput model: a run trained under exponential failures, each attempt booked
as the goodput ledger books it (trainstack/report/goodput.py: starting, kept training, checkpoint saving,
lost work, and the unbilled wait before an attempt; its RunLedger computes the goodput). benchmarks/
goodput_sim.py sweeps intervals with it and tests/plan/test_goodput.py holds its mean to planning/
goodput_model.py's formula, billed and wall-clock.

The first attempt starts in `restart` billed seconds, failure-free. After a failure, with `kinds` empty the
next attempt does the same; with `kinds` (goodput_model.RestartKind) its kind is drawn by share: it waits
its unbilled seconds, then starts in its billed seconds, and a failure during the start ends the attempt
there (restarts can fail). Then training from the last durable checkpoint, a save of `save` seconds after
every `interval` steps of `step` seconds (none after the run's last step, as train.py saves only below
max_steps), each durable `durable_after` seconds after it ends; the first failure (exponential, mean
`mtbf`, memoryless) ends the attempt. What it trained and saved after its last durable save is lost work;
the next attempt resumes from that save.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from trainstack.planning.goodput_model import RestartKind
from trainstack.report.goodput import KEPT, LOST, PARTS, SAVING, STARTING, AttemptLedger, RunLedger


@dataclass(frozen=True)
class Scenario:
    step: float  # seconds per training step
    save: float  # blocking seconds per save
    restart: float  # billed seconds of the first start (and of every restart when `kinds` is empty)
    mtbf: float  # the job's mean time between failures, seconds
    work: float  # seconds of training the run needs
    durable_after: float = 0.0  # seconds after a save's blocking part until it is durable
    kinds: tuple[RestartKind, ...] = ()  # how the job comes back after a failure (empty: `restart`)


def simulate(scenario: Scenario, interval: int, seed: int) -> RunLedger:
    """The ledger of one simulated run checkpointing every `interval` steps."""
    draw = random.Random(seed)
    remaining = scenario.work
    attempts = []
    while remaining > 0:
        can_fail = bool(scenario.kinds and attempts)
        starting, waiting = _start(scenario, draw, first=not attempts)
        failure = draw.expovariate(1 / scenario.mtbf)  # from the start if it can fail, else from training's
        parts = dict.fromkeys(PARTS, 0.0)
        if can_fail and failure < starting:  # the restart itself failed
            parts[STARTING] = failure
        else:
            parts[STARTING] = starting
            training_failure = failure - starting if can_fail else failure  # memoryless: the same law
            remaining = _train(scenario, interval, remaining, training_failure, parts)
        attempts.append(_attempt(len(attempts) + 1, parts, waiting))
    return RunLedger(attempts, backoff_seconds=0.0)


def wall_clock_percent(ledger: RunLedger) -> float:
    """Kept training over billed time plus the unbilled waits (one instance per simulated attempt)."""
    return 100 * ledger.instance_seconds(KEPT) / (ledger.instance_seconds() + ledger.waiting_seconds)


def _start(scenario: Scenario, draw: random.Random, first: bool) -> tuple[float, float]:
    """(billed, unbilled) seconds of an attempt's start."""
    if first or not scenario.kinds:
        return scenario.restart, 0.0
    kind = draw.choices(scenario.kinds, weights=[kind.share for kind in scenario.kinds])[0]
    return kind.billed, kind.unbilled


def _train(scenario: Scenario, interval: int, remaining: float, failure: float, parts: dict) -> float:
    """Book one attempt's training that fails `failure` seconds in; the work still to do after it."""
    segment = interval * scenario.step
    span = segment + scenario.save
    segments_left = math.ceil(remaining / segment - 1e-9)
    if failure >= remaining + (segments_left - 1) * scenario.save:  # the run ends first
        parts[KEPT] = remaining
        parts[SAVING] = (segments_left - 1) * scenario.save
        return 0.0
    done = max(0, math.floor((failure - scenario.durable_after) / span))
    parts[KEPT] = done * segment
    parts[SAVING] = done * scenario.save
    parts[LOST] = failure - done * span
    return remaining - done * segment


def _attempt(number: int, seconds: dict[str, float], waiting: float) -> AttemptLedger:
    parts_ms = {part: round(1000 * value) for part, value in seconds.items()}
    return AttemptLedger(
        number=number,
        instance_count=1,
        hourly_usd=None,
        billed_ms=sum(parts_ms.values()),
        parts_ms=parts_ms,
        waiting_seconds=waiting,
        restarted=number > 1,
    )
