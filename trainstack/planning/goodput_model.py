"""Expected goodput of a job under exponential failures, and the checkpoint interval that maximizes it.

The model (docs/plan.md, "Goodput"): the job trains in segments of `work` seconds, each followed by the
blocking part of a checkpoint save (`save` seconds); failures arrive at a constant rate 1/M (M the job's
MTBF, exponential inter-arrival times) while the job is billed and training or saving; a failure loses
the work since the last completed save and costs a restart of `restart` billed seconds (image and
checkpoint download, set-up, warm-up), during which it is taken not to fail again. Provisioning before
a restart is not billed and is no part of goodput (trainstack/report/goodput.py, the ledger's rules).

Exact expected time per segment, by renewal-reward (the segment of T = work + save seconds completes
after a geometric number of failed tries, each costing the time to its failure plus the restart):

    E[segment] = (M + R) (e^(T/M) - 1)

the form of Daly's exact model (J. T. Daly, "A higher order estimate of the optimum checkpoint interval
for restart dumps", Future Generation Computer Systems 22 (2006) 303-312, section 3, with restarts that do
not fail). Goodput = work / E[segment], split into the ledger's parts:

    kept training  work / E
    saving         save / E                        (one completed save per segment)
    restarts       R (e^(T/M) - 1) / E             (expected failures per segment: e^(T/M) - 1)
    lost work      (M (e^(T/M) - 1) - T) / E       (time from the last save to each failure)

The optimum work per segment does not depend on R (it scales E): d/dw [w / (e^((w+s)/M) - 1)] = 0 gives
(w/M - 1) e^((w+s)/M) + 1 = 0, solved here by bisection (its left side rises monotonically from
1 - e^(s/M) < 0 at w = 0 to 1 at w = M). For small s/M it tends to Young's first-order sqrt(2 s M).
In steps, the interval is the better of the two whole numbers around it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

_BISECTIONS = 200


@dataclass(frozen=True)
class Goodput:
    """Expected shares of billed time (each 0..1, adding up to 1) at one checkpoint interval."""

    interval_steps: int
    interval_seconds: float  # training between saves
    kept: float
    saving: float
    lost: float
    restarts: float

    @property
    def percent(self) -> float:
        return 100 * self.kept

    def parts_percent(self) -> dict[str, float]:
        return {
            "saves": 100 * self.saving,
            "lost work": 100 * self.lost,
            "restarts": 100 * self.restarts,
        }


def expected_segment_seconds(work: float, save: float, restart: float, mtbf: float) -> float:
    """E[billed seconds to complete `work` seconds of training and the save after it]."""
    return (mtbf + restart) * math.expm1((work + save) / mtbf)


def goodput_at(work: float, save: float, restart: float, mtbf: float, steps: int = 0) -> Goodput:
    """The expected goodput and its parts with `work` seconds of training between saves."""
    span = work + save
    failures = math.expm1(span / mtbf)  # expected failures per completed segment
    total = (mtbf + restart) * failures
    return Goodput(
        interval_steps=steps,
        interval_seconds=work,
        kept=work / total,
        saving=save / total,
        lost=(mtbf * failures - span) / total,
        restarts=restart * failures / total,
    )


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
    step_seconds: float, save: float, restart: float, mtbf: float, min_steps: int = 1
) -> Goodput:
    """The whole number of steps between saves (at least `min_steps`) with the highest expected goodput."""
    steps = optimal_work_seconds(save, mtbf) / step_seconds
    candidates = {max(min_steps, math.floor(steps)), max(min_steps, math.ceil(steps))}
    return max(
        (goodput_at(n * step_seconds, save, restart, mtbf, n) for n in candidates),
        key=lambda result: result.kept,
    )


def interval_goodput(steps: int, step_seconds: float, save: float, restart: float, mtbf: float) -> Goodput:
    return goodput_at(steps * step_seconds, save, restart, mtbf, steps)
