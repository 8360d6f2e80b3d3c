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
E[segment] = (M + R) (e^(T/M) - 1). Restarts that can fail themselves: `restart_chain` turns how a job comes
back (in-job recovery, a new job: `Restarts`) into the expected seconds per failure, failed restarts included.

The optimum work per segment depends on neither the restart nor D (they scale the goodput):
d/dw [w / (e^((w+s)/M) - 1)] = 0 gives (w/M - 1) e^((w+s)/M) + 1 = 0, solved here by bisection (its left
side rises monotonically from 1 - e^(s/M) < 0 at w = 0 to 1 at w = M). For small s/M it tends to Young's
first-order sqrt(2 s M). In steps, the interval is the better of the two whole numbers around it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

_BISECTIONS = 200
_LARGEST_EXPONENT = 700.0  # math.exp overflows past ~709.8


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
    if not math.isfinite(restart + unbilled):  # the job never comes back: nothing is kept
        return Goodput(steps, work, kept=0.0, saving=0.0, lost=0.0, restarts=1.0)
    # Durable segments per attempt, e^(-D/M) / (e^(T/M) - 1), written so that no term overflows.
    segments = math.exp(-(durable_after + span) / mtbf) / -math.expm1(-span / mtbf)
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
class Restarts:
    """How a job comes back after a failure, in seconds. A new job waits `provisioning` (unbilled, cannot
    fail), then pulls the image and restores the checkpoint (`before_training`: no training process runs
    yet, so only the failures that take instances down can interrupt it, `hardware_share` of them), then
    warms up (`warmup`: training processes run, any failure can interrupt it). An in-job restart
    (`in_job`: restore and warm-up on the same instances, None where the job has none) follows a failure
    that leaves the instances healthy while training processes run; every other failure starts a new job."""

    before_training: float
    warmup: float
    provisioning: float = 0.0
    in_job: float | None = None
    hardware_share: float = 1.0


def restart_chain(restarts: Restarts, mtbf: float, new_job: bool = False) -> tuple[float, float]:
    """(billed, unbilled) expected seconds from a failure in training (with `new_job`: from an interruption,
    which always starts a new job) until training runs again, failed restarts included; infinite where a new
    job cannot come back (its start outlasts the MTBF many times).

    A try's kind follows from what failed and where: from training or a warm-up, a failure that leaves the
    instances healthy restarts in the job (with in-job recovery), any other a new job; a failure during a
    new job's image pull or restore (hardware only, at rate h/M) starts another new job, which downloads
    again. With routing n (the share of failures that start a new job), a new job's pre-training part
    surviving with p = e^(-h a/M), and q_w, q_i the chances that a warm-up and an in-job restart fail:

        R_N = (e^(h a/M) - 1) M/h + q_w M + q_w (n R_N + (1 - n) R_I)     (divided by p)
        R_I = q_i M + q_i (n R_N + (1 - n) R_I)

    (a try that fails after t seconds costs t; E[min(X, d)] = M q for a phase of d seconds), and the
    provisioning waits W_N = P / p + q_w (n W_N + (1 - n) W_I), W_I = q_i (n W_N + (1 - n) W_I). The
    answer per failure is n R_N + (1 - n) R_I (and the same for W); after an interruption, R_N and W_N."""
    hardware = restarts.hardware_share / mtbf  # failure rate while no training process runs
    exposure = hardware * restarts.before_training
    if exposure > _LARGEST_EXPONENT:
        return math.inf, math.inf
    new_job_share = 1.0 if restarts.in_job is None else restarts.hardware_share
    warmup_fails = -math.expm1(-restarts.warmup / mtbf)
    in_job_fails = 0.0 if restarts.in_job is None else -math.expm1(-restarts.in_job / mtbf)
    pre_training = math.expm1(exposure) / hardware if hardware else restarts.before_training
    # The 2x2 system's determinant: n (1 - q_w) + (1 - n)(1 - q_i), each term exp(-d/M) (no cancellation).
    survive = new_job_share * math.exp(-restarts.warmup / mtbf)
    if restarts.in_job is not None:
        survive += (1 - new_job_share) * math.exp(-restarts.in_job / mtbf)
    if survive == 0:
        return math.inf, math.inf

    def solve(from_new_job: float, from_in_job: float) -> float:
        """n x_N + (1 - n) x_I (or x_N after an interruption) for x_N (1 - q_w n) - q_w (1 - n) x_I =
        from_new_job, -q_i n x_N + (1 - q_i (1 - n)) x_I = from_in_job (Cramer's rule)."""
        stay = 1 - new_job_share
        x_new = (1 - in_job_fails * stay) * from_new_job + warmup_fails * stay * from_in_job
        x_in = in_job_fails * new_job_share * from_new_job + (1 - warmup_fails * new_job_share) * from_in_job
        return (x_new if new_job else new_job_share * x_new + (1 - new_job_share) * x_in) / survive

    billed = solve(pre_training + mtbf * warmup_fails, mtbf * in_job_fails)
    unbilled = solve(restarts.provisioning * math.exp(exposure), 0.0)
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
