"""The calls a queued run really makes in the emulator (the definitions as synthesized, against FakeBatch and
FakeSageMaker), simulated against the synthesized queue-mode roles (tests/iam): what the scenario sends,
with the names it evaluated at run time, is what IAM allows. Run under each plausible naming of the
training job Batch starts (the `fifo` fixture's parameter)."""

from __future__ import annotations

import json
from collections.abc import Iterator

from moto.sagemaker.responses import SageMakerResponse

from tests.iam.calls import Call, arn_casings
from tests.iam.deployed import DeployedApp, Role
from tests.iam.simulator import simulate
from tests.pipeline import harness
from tests.queue import test_queue_pipeline as scenario

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


def test_a_queued_runs_recorded_calls_are_allowed(fifo, fifo_pipeline, monkeypatch):
    described: list[str] = []
    answer = SageMakerResponse.describe_training_job

    def recording(response):
        described.append(json.loads(response.body)["TrainingJobName"])
        return answer(response)

    monkeypatch.setattr(SageMakerResponse, "describe_training_job", recording)
    run = fifo.start("first", {"runName": "trainstack-first"})
    assert harness.wait_for(run).status == "SUCCEEDED"

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
