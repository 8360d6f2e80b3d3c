"""The goodput ledger of a run: every billed second of every attempt, split by what it bought.

Billed: SageMaker bills a job from TrainingStartTime to TrainingEndTime, per instance
(DescribeTrainingJob in botocore's sagemaker model: "You are billed for the time interval between this
time and the value of TrainingEndTime"; BillableTimeInSeconds "* InstanceCount" is the compute billed,
smaller than the training time with managed spot). Each attempt's billed seconds
(collect.Attempt.billed_seconds; while it runs, TrainingStartTime to now) are split into PARTS:

- starting: from TrainingStartTime until the script's training loop starts (its `Training ... on N ranks`
  line; without one, SecondaryStatusTransitions' `Training` StartTime): SageMaker's Starting/Downloading
  still billed, the image and the script's set-up, resuming included;
- kept training: the loop's time up to the point the run kept: all of it for a completed attempt, else up
  to the step of the checkpoint the next attempt resumed from (its log's `Resumed from ... (step N)`), or
  without a next attempt the newest checkpoint the attempt completed; the moment of that step is its
  checkpoint pause's start, else estimated at the pace of the logged steps (progress.Progress.reached);
- checkpoint saving: the loop's checkpoint pauses (`checkpoint_step=N paused_seconds=S`), and the billed
  time after the `Training` phase ended (Uploading the model and output);
- lost work: from that kept point to the failure (the end of the `Training` phase, else TrainingEndTime);
- idle in a hang: a job the watchdog ended (trainstack.faults classifies its FailureReason
  infrastructure/hang): from its last logged step to the failure. Steps done after the last logged
  one count as idle (the log is the only record).

Queue mode: AWS Batch re-submits a service job by itself after a capacity error, each time as a new
training job that bills (collect.py). Each training job Batch started before an attempt's latest is a
row of its own (`attempt N, Batch job K`), split by the rules above as a failed attempt's job followed by
the next job Batch started (which resumes from the run's checkpoint prefix): its
set-up is starting, its training up to the checkpoint that next job resumed from kept training, the rest
up to its failure lost work (the capacity Batch lost took it, as a failure would), and the next job's
starting, when it resumed from a checkpoint, a restart lost to failures. A job whose log and
SecondaryStatusTransitions show no training loop is lost work as a whole, as a direct attempt's is.
The attempt's queue waits count once, on its latest job. So the billed total, and the cost-cap line, is
the sum over every training job, the pipeline's figure (stacks/pipeline/attempt/batch_training_jobs.py).

Moments inside a job come from its log's timestamps (progress.py); where the billed time differs from
the wall time (managed spot), each part gets its share of the billed time. Parts are whole
milliseconds that add up to the billed milliseconds exactly (largest remainders).

Not billed: the run's back-offs, each attempt's wait in the queue (queue mode) and SageMaker's time from
CreationTime to TrainingStartTime (capacity, provisioning). Dollars: instance-seconds at
trainstack.prices' on-demand price; lost to failures = lost work + idle in a hang + the starting of
every later attempt (or Batch job) that resumed from a checkpoint (the restart a failure made necessary).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from fractions import Fraction

from trainstack.cost_cap import usd
from trainstack.faults import INFRASTRUCTURE, Fault, classify
from trainstack.prices import TrainingPrices
from trainstack.report.collect import Attempt, RunReport
from trainstack.runs import hms

STARTING, KEPT, SAVING, LOST, HANG = (
    "starting",
    "kept training",
    "checkpoint saving",
    "lost work",
    "idle in a hang",
)
PARTS = (STARTING, KEPT, SAVING, LOST, HANG)
# What train.py's watchdog writes to /opt/ml/output/failure (SageMaker's FailureReason) for a hang.
# The watchdog's class and kind, whichever way the FailureReason says it (its token, or ExitCode 75).
HANG_FAULT = Fault(INFRASTRUCTURE, "hang")


@dataclass(frozen=True)
class AttemptLedger:
    number: int
    instance_count: int
    hourly_usd: float | None  # per instance; None: the type has no recorded price
    billed_ms: int  # per instance
    parts_ms: dict[str, int]  # per instance, every part of PARTS; adds up to billed_ms
    waiting_seconds: float  # not billed: queued, and CreationTime to TrainingStartTime
    restarted: bool  # a later attempt that resumed from a checkpoint: its starting is lost to failures
    batch_job: int | None = None  # queue mode, Batch started several training jobs: which one, 1 = oldest

    @property
    def label(self) -> str:
        return f"attempt {self.number}" + (f", Batch job {self.batch_job}" if self.batch_job else "")

    @property
    def lost_to_failures_ms(self) -> int:
        return self.parts_ms[LOST] + self.parts_ms[HANG] + (self.parts_ms[STARTING] if self.restarted else 0)

    def usd(self, ms: int) -> float | None:
        return None if self.hourly_usd is None else self.hourly_usd * self.instance_count * ms / 3_600_000


@dataclass(frozen=True)
class RunLedger:
    attempts: list[AttemptLedger]
    backoff_seconds: float
    max_cost_usd: float | None = None  # the profile's cost cap

    @property
    def billed_usd(self) -> float | None:
        costs = [a.usd(a.billed_ms) for a in self.attempts]
        return None if None in costs else sum(costs)

    def cap_text(self) -> str:
        """`; billed $X of the $Y cost cap (Z %)`, or nothing without a cap."""
        if self.max_cost_usd is None:
            return ""
        billed = self.billed_usd
        if billed is None:
            return f"; cost cap {usd(self.max_cost_usd)} (billed cost unknown: a type has no recorded price)"
        share = 100 * billed / self.max_cost_usd
        return f"; billed {usd(billed)} of the {usd(self.max_cost_usd)} cost cap ({share:.0f}%)"

    def instance_ms(self, part: str | None = None) -> int:
        """Billed instance-milliseconds of one part, or of all (None): whole numbers, so ratios are exact."""
        return sum(
            (a.billed_ms if part is None else a.parts_ms[part]) * a.instance_count for a in self.attempts
        )

    def instance_seconds(self, part: str | None = None) -> float:
        return self.instance_ms(part) / 1000

    @property
    def goodput_percent(self) -> float | None:
        billed = self.instance_ms()
        return 100 * self.instance_ms(KEPT) / billed if billed else None

    @property
    def lost_usd(self) -> float | None:
        costs = [a.usd(a.lost_to_failures_ms) for a in self.attempts if a.lost_to_failures_ms]
        return None if None in costs else sum(costs)

    @property
    def waiting_seconds(self) -> float:
        return self.backoff_seconds + sum(a.waiting_seconds for a in self.attempts)

    def summary(self) -> str:
        """One line: goodput, what failures cost, the unbilled waits."""
        goodput = self.goodput_percent
        before = self.waiting_seconds - self.backoff_seconds
        waits = (
            f"waits {hms(self.waiting_seconds)} (not billed: back-offs {hms(self.backoff_seconds)}, "
            f"queued or provisioning {hms(before)})"
        )
        if goodput is None:
            return f"goodput: no billed time yet; {waits}{self.cap_text()}"
        usd = self.lost_usd
        cost = f"${usd:,.2f}" if usd is not None else "unknown $ (an instance type has no recorded price)"
        restarts = sum(a.parts_ms[STARTING] * a.instance_count for a in self.attempts if a.restarted) / 1000
        return (
            f"goodput: {goodput:.1f}% ({hms(self.instance_seconds(KEPT))} of "
            f"{hms(self.instance_seconds())} billed instance time kept); lost to failures: {cost} "
            f"(lost work {hms(self.instance_seconds(LOST))}, "
            f"idle in a hang {hms(self.instance_seconds(HANG))}, restarts {hms(restarts)}); {waits}"
            f"{self.cap_text()}"
        )


def ledger_of(report: RunReport, now: datetime) -> RunLedger:
    """The ledger of a collected run, a row per training job (report.training_jobs: in queue mode each job
    Batch started); `now` ends the billed time of a job still running."""
    followers = [*report.training_jobs[1:], None]
    rows: list[AttemptLedger] = []
    for attempt in report.attempts:
        tried = attempt.training_jobs
        for number, job in enumerate(tried, start=1):
            batch_job = number if len(tried) > 1 else None
            rows.append(attempt_ledger(job, followers[len(rows)], now, bool(rows), batch_job, report.prices))
    return RunLedger(
        rows,
        sum((backoff.end - backoff.start).total_seconds() for backoff in report.backoffs),
        report.max_cost_usd,
    )


def attempt_ledger(
    attempt: Attempt,
    following: Attempt | None,
    now: datetime,
    later: bool,
    batch_job: int | None,
    prices: TrainingPrices | None = None,
) -> AttemptLedger:
    """One training job's row; `following`: the job after it (the next one Batch started, else the next
    attempt's first); `later`: it is not the run's first job."""
    job = attempt.job
    start = job.get("TrainingStartTime")
    end = job.get("TrainingEndTime") or now
    billed = attempt.billed_seconds
    if billed is None:
        billed = (end - start).total_seconds() if start else 0.0
    billed_ms = max(0, round(billed * 1000))
    fallback = KEPT if attempt.status == "Completed" else LOST
    wall = wall_parts(attempt, following, start, end) if start else {}
    return AttemptLedger(
        number=attempt.number,
        instance_count=attempt.instance_count,
        hourly_usd=prices and prices.hourly_usd(attempt.instance_type or ""),
        billed_ms=billed_ms,
        parts_ms=allocate(billed_ms, wall, fallback),
        waiting_seconds=(attempt.queue_wait_seconds or 0.0) + _before_billing(attempt, now),
        restarted=later and attempt.resumed_from is not None,
        batch_job=batch_job,
    )


def _before_billing(attempt: Attempt, now: datetime) -> float:
    job = attempt.job
    created = job.get("CreationTime")
    if not created:
        return 0.0
    billing = job.get("TrainingStartTime") or job.get("TrainingEndTime") or job.get("LastModifiedTime") or now
    return max(0.0, (billing - created).total_seconds())


def wall_parts(
    attempt: Attempt, following: Attempt | None, start: datetime, end: datetime
) -> dict[str, float]:
    """Wall-clock seconds of each part inside the billed window [start, end]."""

    def clip(when: datetime) -> datetime:
        return min(max(when, start), end)

    progress = attempt.progress
    # Training again after Interrupted/Restarting (managed spot) is one stretch: first start to last end.
    training = [
        item for item in attempt.job.get("SecondaryStatusTransitions", []) if item["Status"] == "Training"
    ] or [{}]
    loop_start = clip(progress.ready or training[0].get("StartTime") or start)
    loop_end = max(loop_start, clip(training[-1].get("EndTime") or end))
    if attempt.status == "Completed":
        kept_until = loop_end
    else:
        kept_until = min(max(clip(_kept_point(attempt, following) or loop_start), loop_start), loop_end)
    idle_from = loop_end
    if classify(attempt.job.get("FailureReason")) == HANG_FAULT:
        last_step = max((when for _, when in progress.steps if when <= loop_end), default=loop_start)
        idle_from = max(kept_until, clip(last_step))
    seconds = {
        STARTING: (loop_start - start).total_seconds(),
        SAVING: (end - loop_end).total_seconds(),
    }
    pauses = [(clip(pause.start), clip(pause.end)) for pause in progress.pauses]
    regions = ((KEPT, loop_start, kept_until), (LOST, kept_until, idle_from), (HANG, idle_from, loop_end))
    for part, low, high in regions:
        paused = sum((_overlap(pause, low, high) for pause in pauses), timedelta())
        seconds[part] = (high - low - paused).total_seconds()
        seconds[SAVING] += paused.total_seconds()
    return seconds


def _kept_point(attempt: Attempt, following: Attempt | None) -> datetime | None:
    """When the attempt finished the step of the checkpoint the run kept; None when it made none."""
    progress = attempt.progress
    if following and following.resumed_from:
        step = following.resumed_from[1]
    elif progress.saved:
        step = max(progress.saved)
    else:
        return None
    return progress.reached(step, attempt.resumed_from[1] if attempt.resumed_from else 0)


def _overlap(span: tuple[datetime, datetime], low: datetime, high: datetime) -> timedelta:
    return max(timedelta(), min(span[1], high) - max(span[0], low))


def allocate(total_ms: int, weights: dict[str, float], fallback: str) -> dict[str, int]:
    """`total_ms` split over PARTS in proportion to `weights` (whole ms, largest remainders first, so they
    add up exactly); all of it to `fallback` when no weight is positive."""
    shares = {part: Fraction(max(0.0, weights.get(part, 0.0))) for part in PARTS}
    weight = sum(shares.values())
    if not weight:
        return {part: total_ms if part == fallback else 0 for part in PARTS}
    exact = {part: total_ms * share / weight for part, share in shares.items()}
    parts = {part: int(value) for part, value in exact.items()}
    by_remainder = sorted(PARTS, key=lambda part: exact[part] - parts[part], reverse=True)
    for part in by_remainder[: total_ms - sum(parts.values())]:
        parts[part] += 1
    return parts
