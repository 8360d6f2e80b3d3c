"""Training jobs that follow a script of DescribeTrainingJob answers, for the scenario and cleanup tests.

Job i follows job_scripts[i] (the last script repeats); each DescribeTrainingJob moves a job one phase
on, and its last phase repeats. The failure texts are SageMaker's (DESIGN.md's Facts: the capacity
failure's FailureReason; managed spot's SecondaryStatus MaxWaitTimeExceeded).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from localaws.sagemaker.calls import CallControl
from localaws.sagemaker.training_jobs import STOPPED, FakeSageMaker, Phase, TrainingJob

CAPACITY_ERROR = (
    "CapacityError: Unable to provision requested ML compute capacity. "
    "Please retry using a different ML instance type."
)
STARTING = Phase("InProgress", "Starting")
TRAINING = Phase("InProgress", "Training")
# Training on its instances, billed (Phase.bills): the fake reports TrainingStartTime and, once the job
# ends, TrainingEndTime and BillableTimeInSeconds.
BILLED_TRAINING = Phase("InProgress", "Training", bills=True)
COMPLETED = Phase("Completed", "Completed")
CAPACITY_FAILURE = Phase("Failed", "Failed", CAPACITY_ERROR)
# Managed spot: capacity never came within MaxWaitTimeInSeconds.
SPOT_WAIT_EXCEEDED = Phase("Stopped", "MaxWaitTimeExceeded")


def failed(reason: str) -> Phase:
    return Phase("Failed", "Failed", reason)


@dataclass
class ScriptedRun:
    phases: list[Phase]

    def phase(self, job: TrainingJob) -> Phase:
        if job.stop_requested:
            return STOPPED
        return self.phases[min(job.describes, len(self.phases) - 1)]

    def stop(self, job: TrainingJob) -> None:
        """Nothing runs: the next answer is Stopped."""


@dataclass
class ScriptedJobs:
    job_scripts: list[list[Phase]] = field(default_factory=lambda: [[STARTING, TRAINING, COMPLETED]])
    started: int = 0
    # Jobs started before job_scripts was last set: scripts apply from the next job on.
    script_offset: int = 0

    def start(self, job: TrainingJob) -> ScriptedRun:
        index = self.started - self.script_offset
        self.started += 1
        return ScriptedRun(list(self.job_scripts[min(index, len(self.job_scripts) - 1)]))

    def script(self, job_scripts: list[list[Phase]]) -> None:
        """Script the jobs created from now on."""
        self.job_scripts, self.script_offset = job_scripts, self.started


def scripted_sagemaker(
    job_scripts: list[list[Phase]] | None = None, throttles: dict[str, int] | None = None, **fields: Any
) -> FakeSageMaker:
    """A FakeSageMaker whose jobs follow `job_scripts`, whose calls are throttled `throttles` times by
    action; `fields` are FakeSageMaker's (create_errors, reject_creates, ...)."""
    behaviour = ScriptedJobs(job_scripts) if job_scripts is not None else ScriptedJobs()
    return FakeSageMaker(behaviour=behaviour, control=CallControl(throttles=dict(throttles or {})), **fields)
