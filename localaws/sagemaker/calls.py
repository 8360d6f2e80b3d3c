"""What a test does to SageMaker's calls, whatever runs the jobs: throttle them (ThrottlingException,
"Rate exceeded", as SageMaker answers a request over its rate limit; DESIGN.md's error rule), or hold
them in flight until the test releases them (an execution stopped while its call is on its way).
A held call waits on a condition, never on the wall clock; a test releases every call of an action, or
only one caller's (a job name, a run name)."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

from localaws.emulator import service_error

THROTTLED = ("ThrottlingException", "Rate exceeded")
# Guards against a call held forever by a test that forgot to release it: nothing waits for this time.
HANG_GUARD_SECONDS = 600


@dataclass
class CallControl:
    # Calls answered ThrottlingException before they pass, by action ("DescribeTrainingJob": 3).
    throttles: dict[str, int] = field(default_factory=dict)
    throttled: Counter = field(default_factory=Counter)
    calls: Counter = field(default_factory=Counter)
    waiting: Counter = field(default_factory=Counter)
    held: set[str] = field(default_factory=set)
    released_callers: set[tuple[str, str]] = field(default_factory=set)
    gate: threading.Condition = field(default_factory=threading.Condition)

    def enter(self, action: str, caller: str) -> None:
        """Count the call and wait while `action` is held for `caller`."""

        def may_pass() -> bool:
            return action not in self.held or (action, caller) in self.released_callers

        with self.gate:
            self.calls[action] += 1
            if not may_pass():
                self.waiting[action] += 1
                self.gate.wait_for(may_pass, HANG_GUARD_SECONDS)
                self.waiting[action] -= 1

    def throttle(self, action: str) -> None:
        """Raise ThrottlingException while `action` has throttled answers left."""
        with self.gate:
            if self.throttles.get(action, 0) > 0:
                self.throttles[action] -= 1
                self.throttled[action] += 1
                raise service_error(*THROTTLED)

    def hold(self, action: str) -> None:
        """Calls of `action` ("CreateTrainingJob", "DescribeTrainingJob", ...) wait until it is released."""
        with self.gate:
            self.held.add(action)

    def release_gate(self, action: str, caller: str | None = None) -> None:
        """Every held call of `action` returns, or only `caller`'s (now and later) while others stay held."""
        with self.gate:
            if caller is None:
                self.held.discard(action)
            else:
                self.released_callers.add((action, caller))
            self.gate.notify_all()

    def release_all(self) -> None:
        for action in list(self.held):
            self.release_gate(action)


# SageMaker's answer to a request that failed on its side (the API reference's Common Errors: InternalFailure,
# HTTP 500, "The request processing has failed because of an unknown error, exception or failure.").
INTERNAL_FAILURE = (
    "InternalFailure",
    "The request processing has failed because of an unknown error, exception or failure.",
)


@dataclass
class RegistryControl:
    """What a test does to the Model Registry's calls (model_registry.py)."""

    # Versions ListModelPackages reads per page before it filters them (SageMaker filters after paging:
    # DESIGN.md, round 6); None: MaxResults of them.
    scanned_per_page: int | None = None
    # CreateModelPackage calls that create their version, then answer INTERNAL_FAILURE (a lost response).
    lost_creates: int = 0
    # Every CreateModelPackage call refused so (code, message), creating nothing: a permanent failure.
    refuse_creates: tuple[str, str] | None = None
