"""The hang watchdog: a thread per rank that ends the run when no optimizer step completes within a bound.

On a trip the rank logs every thread's Python stack, leaves its training thread's position (our innermost
line, and the library call below it: DDP's broadcast, a torch.distributed collective, a read) in the job's
store and reads its peers' (hang_culprit.py), writes faults.HANG to the failure file naming the ranks that
were not waiting in a collective, where and on which host, and exits with faults.EXIT_INFRASTRUCTURE
through os._exit: a thread stuck in a collective can be neither interrupted nor joined. Every rank of a
hung job trips within moments of the others (their last step ended in the same collective), so each one's
stacks reach the log, and whichever rank writes the failure file first names the same culprits.

The bound (docs/training.md, "Hang watchdog"), in seconds since the last step or since the start:
- until WARMUP_STEPS steps have completed: --watchdog-startup-seconds (model build, checkpoint load,
  compilation and the first collectives' connections all fall there);
- then --watchdog-step-multiple x the median of the last HISTORY step times, at least
  --watchdog-min-seconds;
- inside `extended` (a checkpoint save, validation, the model export): at least --watchdog-save-seconds
  from its start; the next step's bound counts from its end;
- never above CAP x --collective-timeout-seconds, the process groups' timeout (distributed.setup), so a
  stuck collective trips the watchdog before it times out on one rank.
"""

import argparse
import contextlib
import logging
import os
import statistics
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from faults import EXIT_INFRASTRUCTURE, HANG, report
from hang_culprit import PeerBoard, Position, culprit_sentence, in_collective, this_host
from in_job_restart import restart_round

WARMUP_STEPS = 3
HISTORY = 100
CAP = 0.9  # of the collective timeout: a collective starts after the last step, so the watchdog trips first
# After its report, a tripped rank waits this long before exiting: its peers (whose last step ended in the
# same collective) reach their own bound meanwhile and log their stacks, instead of failing on the broken
# connection its exit leaves them.
PEER_GRACE_SECONDS = 2.0
SCRIPTS = Path(__file__).resolve().parent

log = logging.getLogger("train")


@dataclass(frozen=True)
class Bounds:
    step_multiple: float
    min_seconds: float
    startup_seconds: float
    save_seconds: float
    collective_timeout: float

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Bounds":
        return cls(
            args.watchdog_step_multiple,
            args.watchdog_min_seconds,
            args.watchdog_startup_seconds,
            args.watchdog_save_seconds,
            args.collective_timeout_seconds,
        )

    def of(self, step_times: list[float], activity: str | None) -> tuple[float, str]:
        """The bound, and in words where it comes from."""
        if len(step_times) < WARMUP_STEPS - 1:  # the first step's time since the start is not a step time
            bound, why = self.startup_seconds, f"the startup bound, until {WARMUP_STEPS} steps have completed"
        else:
            median = statistics.median(step_times)
            bound, why = (
                self.step_multiple * median,
                f"{self.step_multiple:g} x the median step, {median:.3g} s",
            )
            if bound < self.min_seconds:
                bound, why = self.min_seconds, "the minimum"
        if activity and bound < self.save_seconds:
            bound, why = self.save_seconds, f"the bound of a {activity}"
        if bound > CAP * self.collective_timeout:
            bound, why = CAP * self.collective_timeout, f"{CAP:g} x the collective timeout"
        return bound, why


class Watchdog:
    """Call `step_completed` after every optimizer step, wrap saves and validation in `extended`."""

    def __init__(self, bounds: Bounds, rank: int, clock: Callable[[], float] = time.monotonic):
        self.bounds, self.rank, self.clock = bounds, rank, clock
        self.step, self.activity = 0, None
        self.step_times: deque[float] = deque(maxlen=HISTORY)
        self.last_progress = clock()
        self._changed = threading.Condition()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Watch from now on."""
        with self._changed:
            self.last_progress = self.clock()
        self._thread = threading.Thread(target=self._watch, name="watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Once the process groups are torn down: a teardown blocked by a dead peer ends as a hang too."""
        with self._changed:
            self._stopped = True
            self._changed.notify()
        if self._thread is not None:  # gone when stop returns: it holds nothing else it could wait on
            self._thread.join()

    def step_completed(self, step: int) -> None:
        with self._changed:
            now = self.clock()
            if self.step:
                self.step_times.append(now - self.last_progress)
            self.step, self.last_progress = step, now
            self._changed.notify()

    @contextlib.contextmanager
    def extended(self, activity: str):
        with self._changed:
            outer, self.activity, self.last_progress = self.activity, activity, self.clock()
            self._changed.notify()
        try:
            yield
        finally:
            with self._changed:
                self.activity, self.last_progress = outer, self.clock()
                self._changed.notify()

    def overdue(self) -> tuple[float, float, str] | None:
        """(seconds waited, bound, why) once no progress came within the bound, else None."""
        waited = self.clock() - self.last_progress
        bound, why = self.bounds.of(list(self.step_times), self.activity)
        return (waited, bound, why) if waited >= bound else None

    def _watch(self) -> None:
        with self._changed:
            while not self._stopped:
                overdue = self.overdue()
                if overdue:
                    self._trip(*overdue)
                bound, _ = self.bounds.of(list(self.step_times), self.activity)
                self._changed.wait(max(0.0, self.last_progress + bound - self.clock()))

    def _trip(self, waited: float, bound: float, why: str) -> None:
        stack, ours = training_thread_stack()
        own = Position(
            self.rank, this_host(), training_thread_position(stack, ours), in_collective(stack, ours)
        )
        after = f"after step {self.step}" if self.step else "before the first step"
        doing = f" during a {self.activity}" if self.activity else ""
        log.error(
            "Rank %d on %s, %s in a collective, at %s. Python stacks of every thread at the watchdog's trip "
            "(the training thread first):\n%s",
            self.rank,
            own.host,
            "waiting" if own.waiting else "not waiting",
            own.where,
            format_stacks(),
        )
        board = PeerBoard.of_default_group()
        whose = (
            culprit_sentence(board.exchange(own), board.world_size)
            if board
            else f"Rank {own.rank} on {own.host} was at {own.where}."
        )
        report(
            HANG,
            f"{whose} No optimizer step completed {after}{doing} in {waited:.0f} s (bound {bound:.0f} s: "
            f"{why}). Reported by rank {self.rank}; every rank's Python stacks are in the log.",
        )
        time.sleep(PEER_GRACE_SECONDS)
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_INFRASTRUCTURE)


def training_thread_stack() -> tuple[traceback.StackSummary, int]:
    """The main thread's stack, and the index of our innermost frame in it (-1: none of ours)."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    stack = traceback.extract_stack(frame) if frame is not None else traceback.StackSummary()
    ours = [index for index, entry in enumerate(stack) if Path(entry.filename).parent == SCRIPTS]
    return stack, ours[-1] if ours else -1


def training_thread_position(stack: traceback.StackSummary, ours: int) -> str:
    """Where the main thread is, in words: our innermost line and, below it, the library call it is in
    (DDP's buffer broadcast, a torch.distributed collective, a file read)."""
    if not stack:
        return "gone"
    if ours < 0:
        return _describe(stack[-1])
    inside = f", inside {_describe(stack[-1])}" if ours < len(stack) - 1 else ""
    return _describe(stack[ours]) + inside


def _describe(entry: traceback.FrameSummary) -> str:
    path = Path(entry.filename)
    name = "/".join(path.parts[path.parts.index("torch") :]) if "torch" in path.parts else path.name
    return f"{name}:{entry.lineno} in {entry.name} ({entry.line})"


def format_stacks() -> str:
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    main = threading.main_thread().ident
    frames = sorted(sys._current_frames().items(), key=lambda item: item[0] != main)
    return "\n".join(
        f"Thread {names.get(ident, ident)}:\n{''.join(traceback.format_stack(frame))}"
        for ident, frame in frames
    )


def hang_if_injected(args: argparse.Namespace, rank: int, step: int, resumed: bool) -> None:
    """Testing aid (drills, the fault demo): rank --inject-hang-rank stops before step --inject-hang-at-step,
    for good, so its peers block in that step's first collective. Only in the job's first
    --inject-hang-rounds rounds (torchrun's in-job restarts, in_job_restart.py), and in its first round only
    if that resumed no checkpoint: the job the pipeline starts after the watchdog's exit trains on."""
    restart = restart_round()
    injected = restart < args.inject_hang_rounds and (restart > 0 or not resumed)
    if args.inject_hang_at_step == step and args.inject_hang_rank == rank and injected:
        log.warning(
            "Rank %d stops before step %d for good (--inject-hang-at-step, a testing aid).", rank, step
        )
        while True:
            time.sleep(3600)
