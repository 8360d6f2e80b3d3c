"""Training jobs that follow a script of DescribeTrainingJob answers, for the scenario and cleanup tests.

Job i follows job_scripts[i] (the last script repeats); each DescribeTrainingJob moves a job one phase
on, and its last phase repeats. With `evaluation_scripts`, evaluation jobs (`<run>-eval`, `<run>-eval2`, ...:
trainstack.registry) follow them instead, the i-th evaluation job the i-th script (the last repeats), and
take no place in job_scripts' order: a test scripts its training jobs as if no run were evaluated. The
failure texts are SageMaker's (DESIGN.md's Facts: the capacity
failure's FailureReason; managed spot's SecondaryStatus MaxWaitTimeExceeded).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from localaws.emulator import service_error
from localaws.sagemaker.calls import CallControl
from localaws.sagemaker.training_jobs import STOPPED, FakeSageMaker, Phase, TrainingJob
from trainstack.registry import EVALUATION_PROGRAM, is_evaluation_job

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


def evaluated(loss: float, **own: float) -> list[Phase]:
    """An evaluation job's phases: it completes, its FinalMetricDataList reporting `loss` (the
    MetricDefinitions of training_scripts/metrics.py) and a profile's own metrics (`accuracy=0.9`: the
    `evaluation:accuracy` that training_scripts.metrics.evaluation_metric_definition reads)."""
    metrics = [
        {"MetricName": "evaluation:loss", "Value": loss},
        {"MetricName": "evaluation:perplexity", "Value": math.exp(loss)},
        {"MetricName": "evaluation:tokens", "Value": 4096.0},
        *({"MetricName": f"evaluation:{name}", "Value": value} for name, value in own.items()),
    ]
    return [TRAINING, Phase("Completed", "Completed", fields={"FinalMetricDataList": metrics})]


def evaluates(job: TrainingJob) -> bool:
    """An evaluation job: named so by the registration machine, or (in queue mode, where Batch names the
    training job `AWSBatch...`) running evaluate.py (its sagemaker_program hyperparameter, JSON-encoded) or
    a profile's own evaluation script, which gets the evaluation set's `eval_manifest_hash` as every
    evaluation job does (stacks/pipeline/registry/evaluation_request.py)."""
    hyperparameters = job.request.get("HyperParameters", {})
    program = hyperparameters.get("sagemaker_program", "")
    return (
        is_evaluation_job(job.name)
        or program.strip('"') == EVALUATION_PROGRAM
        or "eval_manifest_hash" in hyperparameters
    )


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
    # What the evaluation jobs follow, one script each (the last repeats); None: evaluation jobs take their
    # turn in job_scripts.
    evaluation_scripts: list[list[Phase]] | None = None
    evaluations_started: int = 0
    evaluation_offset: int = 0
    # Errors (code, message) that refuse the next CreateTrainingJob calls of evaluation jobs, one each: no
    # job is made (as FakeSageMaker.create_errors, for evaluation jobs only).
    evaluation_create_errors: list[tuple[str, str]] = field(default_factory=list)

    def start(self, job: TrainingJob) -> ScriptedRun:
        if self.evaluation_create_errors and evaluates(job):
            raise service_error(*self.evaluation_create_errors.pop(0))
        if self.evaluation_scripts is not None and evaluates(job):
            index = min(self.evaluations_started - self.evaluation_offset, len(self.evaluation_scripts) - 1)
            self.evaluations_started += 1
            return ScriptedRun(list(self.evaluation_scripts[index]))
        index = self.started - self.script_offset
        self.started += 1
        return ScriptedRun(list(self.job_scripts[min(index, len(self.job_scripts) - 1)]))

    def script(self, job_scripts: list[list[Phase]]) -> None:
        """Script the jobs created from now on."""
        self.job_scripts, self.script_offset = job_scripts, self.started

    def script_evaluations(self, *scripts: list[Phase]) -> None:
        """Script the evaluation jobs created from now on: the first follows scripts[0], and so on."""
        self.evaluation_scripts, self.evaluation_offset = list(scripts), self.evaluations_started


def scripted_sagemaker(
    job_scripts: list[list[Phase]] | None = None,
    throttles: dict[str, int] | None = None,
    evaluation_script: list[Phase] | None = None,
    evaluation_create_errors: list[tuple[str, str]] | None = None,
    **fields: Any,
) -> FakeSageMaker:
    """A FakeSageMaker whose jobs follow `job_scripts` (every evaluation job `evaluation_script`, when
    given; ScriptedJobs.script_evaluations gives each its own), whose calls are throttled `throttles` times
    by action; whose evaluation jobs' creates are refused with `evaluation_create_errors` first; `fields`
    are FakeSageMaker's (create_errors, reject_creates, ...)."""
    behaviour = ScriptedJobs(job_scripts) if job_scripts is not None else ScriptedJobs()
    behaviour.evaluation_create_errors = list(evaluation_create_errors or [])
    if evaluation_script is not None:
        behaviour.script_evaluations(evaluation_script)
    return FakeSageMaker(behaviour=behaviour, control=CallControl(throttles=dict(throttles or {})), **fields)
