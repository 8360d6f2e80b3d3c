"""The calls a queued run really makes in the emulator (the definitions as synthesized, against FakeBatch and
FakeSageMaker), simulated against the synthesized queue-mode roles (tests/iam): what the scenario sends,
with the names it evaluated at run time, is what IAM allows. Run under each plausible naming of the
training job Batch starts (the `fifo` fixture's parameter)."""

from __future__ import annotations

import json
from collections.abc import Iterator

from moto.sagemaker.responses import SageMakerResponse

from localaws.sagemaker import CAPACITY_FAILURE, COMPLETED, STARTING, TRAINING
from tests.iam.calls import Call, arn_casings
from tests.iam.deployed import DeployedApp, Role
from tests.iam.simulator import simulate
from tests.pipeline import harness
from tests.queue import test_queue_pipeline as scenario
from tests.queue.conftest import service_job

# The scenario's fixtures: the FIFO queue's synthesized app, and the emulator running it under each naming.
fifo_pipeline, fifo = scenario.fifo_pipeline, scenario.fifo


def recorded_calls(operations, described: list[str], app: DeployedApp, attempt: Role, jobs) -> Iterator[Call]:
    """The attempt machine's recorded Batch and SageMaker calls as IAM authorizes them, in the deployed
    app's account and Region (the emulator's own account differs)."""

    def arn(service: str, resource: str) -> str:
        return f"arn:aws:{service}:{app.region}:{app.account}:{resource}"

    job_ids = {job.name: job_id for job_id, job in jobs.items()}
    for operation, request in operations:
        caller = f"recorded {operation}"
        if operation == "SubmitServiceJob":
            tags = request.get("tags", {})
            context = {**{f"aws:RequestTag/{k}": v for k, v in tags.items()}, "aws:TagKeys": list(tags)}
            service_job = arn("batch", f"service-job/{job_ids[request['jobName']]}")
            queue = arn("batch", f"job-queue/{request['jobQueue'].split('/')[-1]}")
            yield Call(caller, attempt, "batch:SubmitServiceJob", queue)
            yield Call(caller, attempt, "batch:SubmitServiceJob", service_job, context)
            if tags:
                yield Call(caller, attempt, "batch:TagResource", service_job, context)
        elif operation == "DescribeServiceJob":
            yield Call(caller, attempt, "batch:DescribeServiceJob", "*")
        elif operation == "TerminateServiceJob":
            yield Call(
                caller, attempt, "batch:TerminateServiceJob", arn("batch", f"service-job/{request['jobId']}")
            )
    for name in described:
        for resource in arn_casings(arn("sagemaker", f"training-job/{name}")):
            yield Call("recorded DescribeTrainingJob", attempt, "sagemaker:DescribeTrainingJob", resource)


def _recording_describes(monkeypatch) -> list[str]:
    """The names of the training jobs the attempt describes, from now on."""
    described: list[str] = []
    answer = SageMakerResponse.describe_training_job

    def recording(response):
        described.append(json.loads(response.body)["TrainingJobName"])
        return answer(response)

    monkeypatch.setattr(SageMakerResponse, "describe_training_job", recording)
    return described


def test_a_queued_runs_recorded_calls_are_allowed(fifo, fifo_pipeline, monkeypatch):
    described = _recording_describes(monkeypatch)
    run = fifo.start("first", {"runName": "trainstack-first"})
    assert harness.wait_for(run).status == "SUCCEEDED"
    _assert_allowed(fifo, fifo_pipeline, described)


def test_a_capped_run_describes_every_training_job_batch_started_as_allowed(fifo, fifo_pipeline, monkeypatch):
    """With max_cost_usd (llama-1b-smddp's $300) the attempt describes the training job Batch lost for
    capacity, never seen with its instances, after it ended, to count what it billed
    (stacks/pipeline/attempt/batch_training_jobs.py)."""
    fifo.sagemaker.behaviour.script([[STARTING, CAPACITY_FAILURE], [STARTING, TRAINING, COMPLETED]])
    described = _recording_describes(monkeypatch)
    execution_input = {"runName": "trainstack-lost", "profile": "llama-1b-smddp"}
    assert harness.wait_for(fifo.start("lost", execution_input)).status == "SUCCEEDED"
    lost, finished = fifo.batch.training_jobs_of(service_job("trainstack-lost-1"))
    assert {lost.lower(), finished.lower()} <= {name.lower() for name in described}
    _assert_allowed(fifo, fifo_pipeline, described)


def _assert_allowed(fifo, fifo_pipeline, described: list[str]) -> None:
    settings = fifo_pipeline.settings
    app = DeployedApp(fifo_pipeline.outdir, settings.account, settings.region)
    [attempt] = [
        role for name, (_, role) in app.state_machines().items() if name == "trainstack-pipeline-attempt"
    ]
    calls = list(recorded_calls(fifo.batch.calls, described, app, attempt, fifo.batch.jobs))
    assert {call.action for call in calls} >= {
        "batch:SubmitServiceJob",
        "batch:DescribeServiceJob",
        "sagemaker:DescribeTrainingJob",
    }
    decisions, _ = simulate(calls)
    assert [decision.explain() for decision in decisions if not decision.allowed] == []
