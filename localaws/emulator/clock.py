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
import types
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from unittest import mock

# How often a waiting thread re-checks for an abort or a timeout, in real seconds.
_POLL_SECONDS = 0.01


@dataclass
class Deadline:
    """An execution's TimeoutSeconds on this clock; its watcher resolves it once it has acted."""

    at: float
    resolved: threading.Event = field(default_factory=threading.Event)


class Clock(ABC):
    """Epoch time in seconds plus the waits the interpreter asked for (recorded for tests).

    Every clock counts moto's executions (started, ended) and lets a `states:startExecution` `.sync` task
    sleep between two looks at its child until an execution ends or its own execution stops, instead of
    polling (each look is a DescribeExecution through boto3 and moto, milliseconds of CPU: a parent
    waiting minutes on a child in a demo kept a core a third busy)."""

    # How long a `.sync` child poll blocks at most before it looks again, in real seconds (None: until an
    # execution ends). A clock that runs by itself (Virtual, Scaled) looks again even when no execution
    # ended: a safety net, as a child's status is only ever final once its execution thread ends.
    child_look_seconds: float | None = 0.5

    def __init__(self) -> None:
        self.waits: list[float] = []  # Wait states, in seconds, in the order they started
        self.retry_sleeps: list[float] = []  # Retry backoff intervals, in seconds
        self._lock = threading.Lock()
        self._deadlines: list[Deadline] = []
        self._changed = threading.Condition(self._lock)
        self._running = 0  # executions started and not ended
        self._waits: dict[int, _Blocked] = {}  # by thread: what it is blocked on
        self._ended = 0  # executions ended so far: a child poll started before one ended must look again
        self._polled_at: dict[int, int] = {}  # by thread: self._ended when its last child poll began
        # by thread: running() of the execution whose `.sync` task polls a child
        self._polling: dict[int, Callable[[], bool]] = {}
        self._changes = 0  # every change a SteppedClock's settle() waits on, counted

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

    def child_poll_sleep(self, seconds: float) -> None:
        """A `states:startExecution` `.sync` task between two looks at its child: blocked until an
        execution ends (at once if one ended since its last look began) or its own execution stops
        running, or for child_look_seconds at most. Any other service's `.sync` poll sleeps `seconds` of real
        time, counted as working."""
        me = threading.get_ident()
        running = self._polling.get(me)
        if running is None:
            time.sleep(seconds)
            return
        with self._lock:
            looked_at = self._polled_at.get(me)
            self._polled_at[me] = self._ended
            if looked_at != self._ended:
                return  # an execution ended since the last look began (or this is the first): look again
            blocked = _Blocked(None, running)
            self._waits[me] = blocked
            self._note_change()
        give_up = None if self.child_look_seconds is None else time.monotonic() + self.child_look_seconds
        try:
            while running() and not blocked.due.wait(_POLL_SECONDS):
                if give_up is not None and time.monotonic() > give_up:
                    break
        finally:
            self._unblock()
            with self._lock:
                self._polled_at[me] = self._ended

    def _following_children(self, eval_sync):
        """moto's `.sync` loop with its execution's running() known to child_poll_sleep."""
        from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
            state_task_service_sfn,
        )

        clock = self

        def eval_sync_following(task, env, *args, **kwargs):
            if not isinstance(task, state_task_service_sfn.StateTaskServiceSfn):
                return eval_sync(task, env, *args, **kwargs)
            me = threading.get_ident()
            with clock._lock:
                clock._polling[me] = env.is_running
            try:
                return eval_sync(task, env, *args, **kwargs)
            finally:
                with clock._lock:
                    clock._polling.pop(me, None)
                    clock._polled_at.pop(me, None)

        return eval_sync_following

    def _note_change(self) -> None:
        """Called holding the lock."""
        self._changes += 1
        self._changed.notify_all()

    def _unblock(self) -> None:
        with self._lock:
            self._waits.pop(threading.get_ident(), None)
            self._note_change()

    def execution_started(self) -> None:
        with self._lock:
            self._running += 1
            self._note_change()

    def execution_ended(self) -> None:
        with self._lock:
            self._running -= 1
            self._ended += 1
            for blocked in self._waits.values():
                if blocked.end is None:
                    blocked.due.set()
            self._note_change()

    def patches(self) -> list[Any]:
        """Count moto's executions and let `.sync` polls block on this clock (session.py applies these)."""
        from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
            state_task_service_callback,
        )
        from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker
        from moto.stepfunctions.parser.utils import TMP_THREADS

        clock = self

        def start(worker: ExecutionWorker) -> None:
            clock.execution_started()

            def logic() -> None:
                try:
                    worker._execution_logic()
                finally:
                    clock.execution_ended()

            thread = threading.Thread(target=logic, daemon=True)
            TMP_THREADS.append(thread)
            thread.start()

        callback = state_task_service_callback.StateTaskServiceCallback
        return [
            mock.patch.object(ExecutionWorker, "start", start),
            mock.patch.object(
                state_task_service_callback, "time", types.SimpleNamespace(sleep=self.child_poll_sleep)
            ),
            mock.patch.object(callback, "_eval_sync", self._following_children(callback._eval_sync)),
        ]

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
        return self.at_real(time.time())

    def at_real(self, real_seconds: float) -> float:
        """This clock's reading at a real moment (epoch seconds): what stands in for work that runs in real
        time (the demos' training processes, their log lines) is stamped on this clock with it, as on AWS
        every service stamps one and the same time."""
        return self._real_start + (real_seconds - self._real_start) * self.speedup

    def _pass(self, seconds: float, interrupted: threading.Event, running: Callable[[], bool]) -> None:
        target = self.time() + seconds
        while running() and (left := target - self.time()) > 0:
            interrupted.wait(min(left / self.speedup, _POLL_SECONDS * 10))


class SteppedClock(Clock):
    """Time stands still until `advance()` moves it: a Wait blocks until the clock reaches its end. For
    scenarios whose order matters across executions (a debounce: uploads arrive while a Wait runs), where
    a VirtualClock would let the first Wait jump past events still to come.

    `run_until(condition)` is the discrete-event loop: while the condition is false, let the emulator
    settle, then jump to the earliest pending Wait's end (or execution deadline). Settled is counted, not
    guessed from real time: every execution started (moto's ExecutionWorker.start, `patches()`) is
    running until its thread ends, and the emulator is settled when each running execution is blocked on
    this clock (a Wait or Retry interval not yet due) or on a child execution still running (a `.sync`
    task's poll, which sleeps until some execution ends or its own execution stops), and no deadline
    that has passed is still unhandled. A slow service call, a long JSONata evaluation or a loaded
    machine only make settling take longer: clock time never moves while a state is still working.
    """

    # Real seconds without any change after which settle() gives up (a hung thread, not a slow one): the
    # timer starts again at every change (an execution starting, ending, blocking or unblocking).
    STUCK_AFTER = 120.0
    # A `.sync` child poll is blocked until an execution ends: it counts as waiting, and time stands still.
    child_look_seconds = None

    def __init__(self, start: datetime | None = None) -> None:
        super().__init__()
        self._now = (start or datetime.now()).timestamp()

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds
            for blocked in self._waits.values():
                if blocked.end is not None and blocked.end <= self._now:
                    blocked.due.set()
            self._note_change()

    def _pass(self, seconds: float, interrupted: threading.Event, running: Callable[[], bool]) -> None:
        with self._lock:
            blocked = _Blocked(self._now + seconds, running)
            if blocked.end <= self._now:
                return
            self._waits[threading.get_ident()] = blocked
            self._note_change()
        try:
            while running() and not blocked.due.wait(_POLL_SECONDS):
                pass
        finally:
            self._unblock()

    def _settled(self) -> bool:
        blocked = sum(1 for item in self._waits.values() if not item.due.is_set() and item.running())
        overdue = any(d.at <= self._now and not d.resolved.is_set() for d in self._deadlines)
        return blocked == self._running and not overdue

    def settle(self) -> None:
        """Return once every running execution is blocked on the clock or on a child (class docstring)."""
        with self._lock:
            seen = self._changes
            give_up = time.monotonic() + self.STUCK_AFTER
            while not self._settled():
                if self._changes != seen:
                    seen, give_up = self._changes, time.monotonic() + self.STUCK_AFTER
                elif time.monotonic() > give_up:
                    raise TimeoutError(
                        f"the emulator did not settle: nothing changed for {self.STUCK_AFTER} real seconds"
                    )
                # Also re-checks executions stopped meanwhile (their running() turns false unannounced).
                self._changed.wait(_POLL_SECONDS)

    def next_end(self) -> float | None:
        """When the earliest pending Wait, Retry interval or execution deadline is due, or None."""
        with self._lock:
            ends = [item.end for item in self._waits.values() if item.end is not None]
            ends += [d.at for d in self._deadlines if not d.resolved.is_set()]
            return min(ends, default=None)

    def run_until(self, condition: Callable[[], bool], *, limit_seconds: float) -> None:
        """Settle and jump from Wait to Wait until `condition()` holds; at most `limit_seconds` of clock
        time pass (then TimeoutError, as when nothing is pending and the condition still fails)."""
        stop_at = self._now + limit_seconds
        while True:
            self.settle()
            if condition():
                return
            end = self.next_end()
            if end is None:
                raise TimeoutError("condition not met and nothing pending: every execution has ended")
            if end > stop_at:
                raise TimeoutError(f"condition not met within {limit_seconds} s of clock time")
            self.advance(max(0.0, end - self._now))


@dataclass
class _Blocked:
    """A thread blocked on a clock: until `end` (a Wait, a Retry interval) or, with no end, until
    an execution ends (a `.sync` poll); `due` once that has happened."""

    end: float | None
    running: Callable[[], bool]
    due: threading.Event = field(default_factory=threading.Event)
