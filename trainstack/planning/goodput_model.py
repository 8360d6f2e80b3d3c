"""Expected goodput of a job under exponential failures, and the checkpoint interval that maximizes it.

The model (docs/plan.md, "Goodput"): the job trains in segments of `work` seconds, each followed by the
blocking part of a checkpoint save (`save` seconds); a save is durable `durable_after` seconds after its
blocking part ends (an async save's background write, SageMaker's upload): a failure before then resumes
from the save before it. Failures arrive at a constant rate 1/M (M the job's MTBF, exponential inter-arrival
times) while the job runs; a failure loses the work since the last durable save and costs a restart.

With restarts taken as `restart` seconds on average (billed) plus `unbilled` seconds (the provisioning wait,
counted in wall-clock time only), renewal-reward over attempts gives, per attempt (from a resume to the next
failure, E = M of running plus the restart), the expected durable segments

    S = sum over n >= 1 of P(failure after n T + D) = e^(-D/M) / (e^(T/M) - 1)        (T = work + save)

so that goodput = work S / (M + restart + unbilled), and the shares per attempt:

    kept training  work S / E          saving   save S / E          (saves that became durable)
    restarts       restart / E         waiting  unbilled / E        (wall-clock only)
    lost work      (M - T S) / E                                     (training and saves lost to failures)

With D = 0 and no wait this is Daly's exact model (J. T. Daly, "A higher order estimate of the optimum
checkpoint interval for restart dumps", Future Generation Computer Systems 22 (2006) 303-312, section 3):
E[segment] = (M + R) (e^(T/M) - 1). Restarts that can fail themselves: `restart_chain` turns a mix of
restart kinds (in-job recovery, a new job) into the expected seconds per failure, failed restarts included.

The optimum work per segment depends on neither the restart nor D (they scale the goodput):
d/dw [w / (e^((w+s)/M) - 1)] = 0 gives (w/M - 1) e^((w+s)/M) + 1 = 0, solved here by bisection (its left
side rises monotonically from 1 - e^(s/M) < 0 at w = 0 to 1 at w = M). For small s/M it tends to Young's
first-order sqrt(2 s M). In steps, the interval is the better of the two whole numbers around it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

_BISECTIONS = 200


@dataclass(frozen=True)
class Goodput:
    """Expected shares of billed time, or of wall-clock time with `waiting` (each 0..1, adding up to 1), at
    one checkpoint interval."""

    interval_steps: int
    interval_seconds: float  # training between saves
    kept: float
    saving: float
    lost: float
    restarts: float
    waiting: float = 0.0  # unbilled provisioning: wall-clock shares only

    @property
    def percent(self) -> float:
        return 100 * self.kept

    def parts_percent(self) -> dict[str, float]:
        return {
            "saves": 100 * self.saving,
            "lost work": 100 * self.lost,
            "restarts": 100 * self.restarts,
        } | ({"provisioning": 100 * self.waiting} if self.waiting else {})


def goodput_at(
    work: float,
    save: float,
    restart: float,
    mtbf: float,
    steps: int = 0,
    durable_after: float = 0.0,
    unbilled: float = 0.0,
) -> Goodput:
    """The expected goodput and its parts with `work` seconds of training between saves."""
    span = work + save
    segments = math.exp(-durable_after / mtbf) / math.expm1(span / mtbf)  # durable segments per attempt
    total = mtbf + restart + unbilled
    return Goodput(
        interval_steps=steps,
        interval_seconds=work,
        kept=work * segments / total,
        saving=save * segments / total,
        lost=(mtbf - span * segments) / total,
        restarts=restart / total,
        waiting=unbilled / total,
    )


@dataclass(frozen=True)
class RestartKind:
    """One way a job comes back after a failure: `share` of failures, `billed` seconds that can themselves
    fail (image pull, restore, warm-up), `unbilled` seconds before them that cannot (provisioning)."""

    share: float
    billed: float
    unbilled: float = 0.0


def restart_chain(kinds: tuple[RestartKind, ...], mtbf: float) -> tuple[float, float]:
    """(billed, unbilled) expected seconds from a failure until training runs again, failed restarts
    included: a try of kind k fails with q_k = 1 - e^(-billed_k/M) after M q_k seconds on average, and then
    the next try's kind is drawn again, so r = sum_k share_k (cost_k) / (1 - sum_k share_k q_k)."""
    failing = [-math.expm1(-kind.billed / mtbf) for kind in kinds]
    again = 1 - sum(kind.share * q for kind, q in zip(kinds, failing, strict=True))
    billed = sum(kind.share * mtbf * q for kind, q in zip(kinds, failing, strict=True)) / again
    unbilled = sum(kind.share * kind.unbilled for kind in kinds) / again
    return billed, unbilled


def optimal_work_seconds(save: float, mtbf: float) -> float:
    """The work per segment that maximizes goodput (the root of (w/M - 1) e^((w+s)/M) + 1)."""
    if save <= 0:
        return 0.0
    low, high = 0.0, mtbf
    for _ in range(_BISECTIONS):
        middle = (low + high) / 2
        if (middle / mtbf - 1) * math.exp((middle + save) / mtbf) + 1 < 0:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def best_interval(
    step_seconds: float,
    save: float,
    restart: float,
    mtbf: float,
    min_steps: int = 1,
    durable_after: float = 0.0,
    unbilled: float = 0.0,
) -> Goodput:
    """The whole number of steps between saves (at least `min_steps`) with the highest expected goodput."""
    steps = optimal_work_seconds(save, mtbf) / step_seconds
    candidates = {max(min_steps, math.floor(steps)), max(min_steps, math.ceil(steps))}
    return max(
        (interval_goodput(n, step_seconds, save, restart, mtbf, durable_after, unbilled) for n in candidates),
        key=lambda result: result.kept,
    )


def interval_goodput(
    steps: int,
    step_seconds: float,
    save: float,
    restart: float,
    mtbf: float,
    durable_after: float = 0.0,
    unbilled: float = 0.0,
) -> Goodput:
    return goodput_at(steps * step_seconds, save, restart, mtbf, steps, durable_after, unbilled)
