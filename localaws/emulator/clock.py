"""Clocks for the local Step Functions emulator: what `$now()`, `$millis()`, execution start times and
history timestamps read, and how Wait states, Retry backoff and execution timeouts pass.

- VirtualClock: waits take no real time; they move the clock forward (tests, fast demos).
- ScaledClock: waits are really slept, shortened by a factor, and the clock runs that much faster than
  real time (a demo a person watches).

A clock is shared by every execution of one emulator session: it is the world's time, so waits of
executions running side by side add up on a VirtualClock (time only ever moves forward).
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

# How often a waiting thread re-checks for an abort or a timeout, in real seconds.
_POLL_SECONDS = 0.01


@dataclass
class Deadline:
    """An execution's TimeoutSeconds on this clock; its watcher resolves it once it has acted."""

    at: float
    resolved: threading.Event = field(default_factory=threading.Event)


class Clock(ABC):
    """Epoch time in seconds plus the waits the interpreter asked for (recorded for tests)."""

    def __init__(self) -> None:
        self.waits: list[float] = []  # Wait states, in seconds, in the order they started
        self.retry_sleeps: list[float] = []  # Retry backoff intervals, in seconds
        self._lock = threading.Lock()
        self._deadlines: list[Deadline] = []

    @abstractmethod
    def time(self) -> float:
        """Seconds since the epoch on this clock."""

    @abstractmethod
    def _pass(self, seconds: float, interrupted: threading.Event, running: Callable[[], bool]) -> None:
        """Let `seconds` of clock time pass for one waiting state, returning early once not running()."""

    def millis(self) -> int:
        return round(self.time() * 1000)

    def watched_time(self) -> float:
        """time() for watchers that poll it (execution timeouts): not a sign of activity."""
        return self.time()

    def now(self, tz=None) -> datetime:
        return datetime.fromtimestamp(self.time(), tz)

    def wait_state(self, seconds: float, interrupted: threading.Event, running: Callable[[], bool]) -> None:
        """A Wait state: returns after `seconds` of clock time, or early when the execution stops."""
        with self._lock:
            self.waits.append(seconds)
        if seconds > 0:
            self._pass(seconds, interrupted, running)

    def retry_sleep(self, seconds: float) -> None:
        """A Retry interval (moto cannot interrupt these, nor can AWS)."""
        with self._lock:
            self.retry_sleeps.append(seconds)
        if seconds > 0:
            self._pass(seconds, threading.Event(), lambda: True)

    def deadline(self, seconds: float) -> Deadline:
        deadline = Deadline(self.time() + seconds)
        with self._lock:
            self._deadlines.append(deadline)
        return deadline

    def resolve(self, deadline: Deadline) -> None:
        with self._lock:
            self._deadlines.remove(deadline)
        deadline.resolved.set()

    def _next_deadline(self, after: float, until: float) -> Deadline | None:
        with self._lock:
            pending = [d for d in self._deadlines if after < d.at <= until and not d.resolved.is_set()]
        return min(pending, key=lambda d: d.at, default=None)


class VirtualClock(Clock):
    """Real time plus every wait so far: a 48-hour Wait returns at once and moves the clock 48 hours on.

    A wait that would cross an execution's deadline stops there until that execution's watcher has timed
    it out, so no state of a timed-out execution runs after its deadline.
    """

    def __init__(self, start: datetime | None = None) -> None:
        super().__init__()
        self._offset = (start.timestamp() - time.time()) if start else 0.0

    def time(self) -> float:
        return time.time() + self._offset

    def advance(self, seconds: float) -> None:
        """Move the clock forward (a test's "time passes" without any wait)."""
        with self._lock:
            self._offset += seconds

    def _pass(self, seconds: float, interrupted: threading.Event, running: Callable[[], bool]) -> None:
        target = self.time() + seconds
        while running():
            now = self.time()
            deadline = self._next_deadline(now, target)
            if deadline is None:
                self.advance(max(0.0, target - now))
                return
            self.advance(deadline.at - now)
            while running() and not deadline.resolved.is_set():
                interrupted.wait(_POLL_SECONDS)


class ScaledClock(Clock):
    """Runs `speedup` times faster than real time from its creation: a 300 s Wait with speedup 100
    sleeps 3 real seconds, and `$millis()` tells 300 s have passed."""

    def __init__(self, speedup: float) -> None:
        super().__init__()
        if speedup <= 0:
            raise ValueError(f"speedup must be a positive number, got {speedup}")
        self.speedup = speedup
        self._real_start = time.time()

    def time(self) -> float:
        return self._real_start + (time.time() - self._real_start) * self.speedup

    def _pass(self, seconds: float, interrupted: threading.Event, running: Callable[[], bool]) -> None:
        target = self.time() + seconds
        while running() and (left := target - self.time()) > 0:
            interrupted.wait(min(left / self.speedup, _POLL_SECONDS * 10))


class SteppedClock(Clock):
    """Time stands still until `advance()` moves it: a Wait blocks until the clock reaches its end. For
    scenarios whose order matters across executions (a debounce: uploads arrive while a Wait runs), where
    a VirtualClock would let the first Wait jump past events still to come.

    `run_until(condition)` is the discrete-event loop: while the condition is false, let the emulator
    settle (no clock reads for a while: every state transition reads the clock), then jump to the earliest
    pending Wait's end.
    """

    # Real seconds without a clock read after which the emulator counts as settled.
    SETTLED_AFTER = 0.05
    # Real seconds with nothing pending after which run_until gives up.
    STUCK_AFTER = 20.0

    def __init__(self, start: datetime | None = None) -> None:
        super().__init__()
        self._now = (start or datetime.now()).timestamp()
        self._ends: list[float] = []
        self._reads = 0

    def time(self) -> float:
        self._reads += 1
        return self._now

    def watched_time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds

    def _pass(self, seconds: float, interrupted: threading.Event, running: Callable[[], bool]) -> None:
        end = self._now + seconds
        with self._lock:
            self._ends.append(end)
        try:
            while running() and self._now < end:
                interrupted.wait(_POLL_SECONDS)
        finally:
            with self._lock:
                self._ends.remove(end)

    def settle(self) -> None:
        """Return once nothing has read the clock for SETTLED_AFTER real seconds."""
        while True:
            before = self._reads
            time.sleep(self.SETTLED_AFTER)
            if self._reads == before:
                return

    def next_end(self) -> float | None:
        """When the earliest pending Wait (or Retry interval) ends, or None."""
        with self._lock:
            return min(self._ends, default=None)

    def run_until(self, condition: Callable[[], bool], *, limit_seconds: float) -> None:
        """Settle and jump from Wait to Wait until `condition()` holds; at most `limit_seconds` of clock
        time pass (then TimeoutError). With no Wait pending, a state is still working (a long JSONata
        evaluation reads no clock): keep settling, for up to STUCK_AFTER real seconds."""
        stop_at = self._now + limit_seconds
        idle_since = time.monotonic()
        while True:
            self.settle()
            if condition():
                return
            end = self.next_end()
            if end is None:
                if time.monotonic() - idle_since > self.STUCK_AFTER:
                    raise TimeoutError(f"condition not met and no Wait pending for {self.STUCK_AFTER} s")
                continue
            if end > stop_at:
                raise TimeoutError(f"condition not met within {limit_seconds} s of clock time")
            self.advance(max(0.0, end - self._now))
            idle_since = time.monotonic()
