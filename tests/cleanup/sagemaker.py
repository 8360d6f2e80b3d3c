"""The pipeline harness's scripted SageMaker plus what cleanup scenarios need: calls held in flight
until a test releases them (an execution aborted during CreateTrainingJob), a job that appears only
some clock time after its create call, and a status call (ListTrainingJobs) that keeps a stand-in
pipeline execution RUNNING while it is held."""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from moto.core.responses import ActionResult
from moto.sagemaker.responses import SageMakerResponse

from tests.pipeline.harness import FakeJob, FakeSageMaker, FakeSageMakerError
from trainstack.emulator import Clock


@dataclass
class CleanupSageMaker(FakeSageMaker):
    clock: Clock | None = None
    # Clock seconds between a create call and the job appearing to Describe, ListTags and Search.
    create_latency: float = 0.0
    gates: dict[str, threading.Event] = field(default_factory=dict)
    waiting: Counter = field(default_factory=Counter)
    calls: Counter = field(default_factory=Counter)
    visible_at: dict[str, float] = field(default_factory=dict)

    def hold(self, action: str) -> None:
        """Calls of `action` ("CreateTrainingJob", "ListTrainingJobs") wait until release(action)."""
        self.gates[action] = threading.Event()

    def release_gate(self, action: str) -> None:
        self.gates.pop(action).set()

    def release_all(self) -> None:
        for action in list(self.gates):
            self.release_gate(action)

    def _enter(self, action: str) -> None:
        self.calls[action] += 1
        gate = self.gates.get(action)
        if gate is not None:
            self.waiting[action] += 1
            gate.wait(60)
            self.waiting[action] -= 1

    def visible(self, name: str) -> bool:
        return self.clock.time() >= self.visible_at.get(name, float("inf"))

    def create(self, request: dict[str, Any]) -> dict[str, Any]:
        self._enter("CreateTrainingJob")
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

    def list_training_jobs(self) -> dict[str, Any]:
        self._enter("ListTrainingJobs")
        return {"TrainingJobSummaries": []}

    def install(self, monkeypatch) -> None:
        """The stand-in pipeline's status call; the harness installs the rest."""

        def list_training_jobs(response: SageMakerResponse) -> ActionResult:
            json.loads(response.body or "{}")
            return ActionResult(self.list_training_jobs())

        monkeypatch.setattr(SageMakerResponse, "list_training_jobs", list_training_jobs)
