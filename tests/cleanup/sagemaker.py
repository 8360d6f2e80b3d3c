"""The pipeline harness's scripted SageMaker plus what cleanup scenarios need: calls held in flight
until a test releases them (an execution aborted during CreateTrainingJob), a job that appears only
some clock time after its create call, and a status call (ListTrainingJobs) that keeps a stand-in
pipeline execution RUNNING while it is held. A held call waits on an event, never on the wall clock:
a test releases every call of an action, or only one caller's (a job name, a run name)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from moto.core.responses import ActionResult
from moto.sagemaker.responses import SageMakerResponse

from localaws.emulator import Clock
from tests.pipeline.harness import HANG_GUARD_SECONDS, FakeJob, FakeSageMaker, FakeSageMakerError


@dataclass
class CleanupSageMaker(FakeSageMaker):
    clock: Clock | None = None
    # Clock seconds between a create call and the job appearing to Describe, ListTags and Search.
    create_latency: float = 0.0
    held: set[str] = field(default_factory=set)
    released_callers: set[tuple[str, str]] = field(default_factory=set)
    gate: threading.Condition = field(default_factory=threading.Condition)
    waiting: Counter = field(default_factory=Counter)
    calls: Counter = field(default_factory=Counter)
    visible_at: dict[str, float] = field(default_factory=dict)

    def hold(self, action: str) -> None:
        """Calls of `action` ("CreateTrainingJob", "ListTrainingJobs") wait until it is released."""
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

    def _enter(self, action: str, caller: str) -> None:
        def may_pass() -> bool:
            return action not in self.held or (action, caller) in self.released_callers

        with self.gate:
            self.calls[action] += 1
            if not may_pass():
                self.waiting[action] += 1
                self.gate.wait_for(may_pass, HANG_GUARD_SECONDS)
                self.waiting[action] -= 1

    def visible(self, name: str) -> bool:
        return self.clock.time() >= self.visible_at.get(name, float("inf"))

    def create(self, request: dict[str, Any]) -> dict[str, Any]:
        self._enter("CreateTrainingJob", request["TrainingJobName"])
        response = super().create(request)
        self.visible_at[request["TrainingJobName"]] = self.clock.time() + self.create_latency
        return response

    def describe(self, name: str) -> dict[str, Any]:
        self.calls["DescribeTrainingJob"] += 1
        return super().describe(name)

    def _job(self, name: str) -> FakeJob:
        if not self.visible(name):
            raise FakeSageMakerError(*self.missing_job_error)
        return self.jobs[name]

    def list_training_jobs(self, request: dict[str, Any]) -> dict[str, Any]:
        self._enter("ListTrainingJobs", request["NameContains"])
        return {"TrainingJobSummaries": []}

    def install(self, monkeypatch) -> None:
        """The stand-in pipeline's status call; the harness installs the rest."""

        def list_training_jobs(response: SageMakerResponse) -> ActionResult:
            return ActionResult(self.list_training_jobs(json.loads(response.body or "{}")))

        monkeypatch.setattr(SageMakerResponse, "list_training_jobs", list_training_jobs)
