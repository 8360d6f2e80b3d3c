"""Monte-Carlo check of the goodput model: a run trained under exponential failures, each attempt booked
as the goodput ledger books it (trainstack/report/goodput.py: starting, kept training, checkpoint saving,
lost work, and the unbilled wait before an attempt; its RunLedger computes the goodput). benchmarks/
goodput_sim.py sweeps intervals with it and tests/plan hold its mean to planning/goodput_model.py's
formulas, billed and wall-clock.

The first attempt starts in `restart` billed seconds, failure-free. After a failure, with `restarts` None
the next attempt does the same. With `restarts` (goodput_model.Restarts) each failure is drawn as one that
takes instances down (`hardware_share`) or one that leaves them healthy, and the next try follows from it,
never drawn afresh: a healthy-instance failure while training processes run (training, a warm-up, an
in-job restart) restarts in the job where the job has in-job restarts; every other failure starts a new
job, which waits its provisioning (unbilled), pulls and restores (only hardware failures strike there: no
training process runs yet) and warms up. A failure during a try ends that attempt there (restarts can fail).
Then training from the last durable checkpoint, a save of `save` seconds after every `interval` steps of
`step` seconds (none after the run's last step, as train.py saves only below max_steps), each durable
`durable_after` seconds after it ends; the first failure (exponential, mean `mtbf`, memoryless) ends the
attempt. What it trained and saved after its last durable save is lost work; the next attempt resumes from
that save.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from trainstack.planning.goodput_model import Restarts
from trainstack.report.goodput import KEPT, LOST, PARTS, SAVING, STARTING, AttemptLedger, RunLedger


@dataclass(frozen=True)
class Scenario:
    step: float  # seconds per training step
    save: float  # blocking seconds per save
    restart: float  # billed seconds of the first start (and of every restart when `restarts` is None)
    mtbf: float  # the job's mean time between failures, seconds
    work: float  # seconds of training the run needs
    durable_after: float = 0.0  # seconds after a save's blocking part until it is durable
    restarts: Restarts | None = (
        None  # how the job comes back after a failure (None: `restart`, never failing)
    )


def simulate(scenario: Scenario, interval: int, seed: int) -> RunLedger:
    """The ledger of one simulated run checkpointing every `interval` steps."""
    draw = random.Random(seed)
    remaining = scenario.work
    attempts = []
    in_job = False  # the next try restarts in the job
    while remaining > 0:
        parts = dict.fromkeys(PARTS, 0.0)
        waiting, started = _start(scenario, draw, parts, first=not attempts, in_job=in_job)
        if started:
            failure = draw.expovariate(1 / scenario.mtbf)  # memoryless: the same law from training's start
            remaining = _train(scenario, interval, remaining, failure, parts)
            in_job = _in_job_after(scenario, draw)
        else:
            in_job = started is None and _in_job_after(scenario, draw)
        attempts.append(_attempt(len(attempts) + 1, parts, waiting))
    return RunLedger(attempts, backoff_seconds=0.0)


def wall_clock_percent(ledger: RunLedger) -> float:
    """Kept training over billed time plus the unbilled waits (one instance per simulated attempt)."""
    return 100 * ledger.instance_seconds(KEPT) / (ledger.instance_seconds() + ledger.waiting_seconds)


def _start(
    scenario: Scenario, draw: random.Random, parts: dict, first: bool, in_job: bool
) -> tuple[float, bool | None]:
    """Book an attempt's start in `parts`; (unbilled seconds, True: training runs, None: a failure struck
    while training processes ran, False: a hardware failure struck before any did)."""
    restarts = scenario.restarts
    if first or restarts is None:
        parts[STARTING] = scenario.restart
        return 0.0, True
    if in_job:
        phases = [(restarts.in_job, 1 / scenario.mtbf, None)]
        waiting = 0.0
    else:
        phases = [
            (restarts.before_training, restarts.hardware_share / scenario.mtbf, False),
            (restarts.warmup, 1 / scenario.mtbf, None),
        ]
        waiting = restarts.provisioning
    for seconds, rate, failed in phases:
        failure = draw.expovariate(rate) if rate else math.inf
        if failure < seconds:
            parts[STARTING] += failure
            return waiting, failed
        parts[STARTING] += seconds
    return waiting, True


def _in_job_after(scenario: Scenario, draw: random.Random) -> bool:
    """Whether a failure while training processes run restarts in the job (it left the instances healthy)."""
    restarts = scenario.restarts
    if restarts is None or restarts.in_job is None:
        return False
    return draw.random() >= restarts.hardware_share


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
