"""The queued attempt's state machine, as synthesized, in moto's interpreter against FakeBatch."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest

from localaws.emulator.fake_batch import FakeBatch
from localaws.sagemaker import CAPACITY_FAILURE, COMPLETED, STARTING, TRAINING, FakeSageMaker, failed
from stacks.pipeline.request_guard import allowed_requests
from tests.domain.conftest import FSX_RESOURCES
from tests.pipeline.harness import wait_for, wait_until
from tests.queue.conftest import (
    ACCOUNT,
    JOB_ARN,
    QUEUE_ARN,
    QUEUE_NAME,
    REGION,
    RUN_NAMES,
    SERVICE_JOB_ARN,
    create_machine,
    definition_of,
    service_job,
)
from trainstack.config_loading import load_settings
from trainstack.job_request import RunRequest, build_create_training_job_request
from trainstack.pipeline_runs import PipelineRuns
from trainstack.queue_settings import QueueSettings

# The shares these tests submit to, in a queue as large as the fake's largest.
QUEUE = QueueSettings(enabled=True, max_instances=8, shares={"research": 1, "teamA": 2, "teamB": 1})


def allowed() -> dict[str, Any]:
    """What the attempt allows: the default config's profiles with FSX_RESOURCES and QUEUE."""
    settings = load_settings(environ={})
    return allowed_requests(PipelineRuns(settings.project, tuple(settings.profiles), QUEUE), FSX_RESOURCES)


@functools.cache  # built on first use, not as each worker collects the file
def attempt_definition() -> str:
    from stacks.pipeline.attempt.queued_training_attempt import QueuedTrainingAttempt

    def build(stack):
        return QueuedTrainingAttempt(
            stack,
            "Attempt",
            partition="aws",
            job_queue_arn=QUEUE_ARN,
            queue_name=QUEUE_NAME,
            job_arns=[JOB_ARN],
            service_job_arn=SERVICE_JOB_ARN,
            batch_job_permissions=[],
            run_names=RUN_NAMES,
            allowed=allowed(),
        ).start

    return definition_of(build)


def attempt_input(
    run_name: str, *, instances: int | None = None, priority=None, share=None
) -> dict[str, Any]:
    settings = load_settings(environ={})
    profile = settings.profiles[0]
    run = RunRequest(profile=profile.name, run_name=run_name, instance_count=instances)
    request = build_create_training_job_request(
        profile, FSX_RESOURCES, run, 1, f"arn:aws:states:{REGION}:{ACCOUNT}:execution:p:{run_name}"
    )
    return {
        "request": request,
        "runName": run_name,
        "stopAtMillis": 0,
        "timeLimitSeconds": 3 * 24 * 3600,
        "throttles": 0,
        "priority": priority,
        "share": share,
    }


@pytest.fixture
def world(queue_world):
    client, batch, sagemaker, clock = queue_world
    return client, create_machine(client, "attempt", attempt_definition()), batch, sagemaker, clock


def run(client, arn, inputs: dict[str, dict]) -> dict[str, Any]:
    executions = {
        name: client.start_execution(stateMachineArn=arn, name=name, input=json.dumps(value))["executionArn"]
        for name, value in inputs.items()
    }
    return {name: wait_for(execution) for name, execution in executions.items()}


def test_one_attempt_completes_through_the_queue(world):
    client, arn, batch, sagemaker, _ = world
    outcome = run(client, arn, {"a": attempt_input("trainstack-a")})["a"]
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert outcome.output["status"] == "Completed"
    # Batch's name for the training job, learnt from DescribeServiceJob's latestAttempt.
    assert outcome.output["job"]["name"] == batch.training_jobs_of(service_job("trainstack-a-1"))[-1]
    assert outcome.output["job"]["name"].startswith("AWSBatch" + service_job("trainstack-a-1"))
    [(operation, submitted)] = [call for call in batch.calls if call[0] == "SubmitServiceJob"]
    assert json.loads(submitted["serviceRequestPayload"]) == attempt_input("trainstack-a")["request"]
    assert "schedulingPriority" not in submitted and "shareIdentifier" not in submitted


def start(client, arn, name: str, value: dict) -> str:
    return client.start_execution(stateMachineArn=arn, name=name, input=json.dumps(value))["executionArn"]


def submitted(batch: FakeBatch, name: str) -> bool:
    return any(job.name == name for job in batch.jobs.values())


def started(batch: FakeBatch) -> list[str]:
    """Service jobs in the order Batch started them (SCHEDULED first reached)."""
    seen: list[str] = []
    for name, status in batch.transitions:
        if status == "SCHEDULED" and name not in seen:
            seen.append(name)
    return seen


def blocking(sagemaker: FakeSageMaker) -> None:
    """The next training job runs until release(); the ones after it complete."""
    sagemaker.behaviour.script([[STARTING, TRAINING], [STARTING, TRAINING, COMPLETED]])


def release(sagemaker: FakeSageMaker, batch: FakeBatch, name: str) -> None:
    """Complete the training job Batch started for service job `name`."""
    sagemaker.jobs[batch.training_jobs_of(name)[0]].run.phases.append(COMPLETED)


def test_second_run_waits_runnable_while_the_environment_is_full_then_runs(world):
    client, arn, batch, sagemaker, _ = world
    first = start(client, arn, "first", attempt_input("trainstack-first"))
    wait_until(lambda: submitted(batch, service_job("trainstack-first-1")))
    second = start(client, arn, "second", attempt_input("trainstack-second"))
    outcomes = [wait_for(first), wait_for(second)]
    assert [outcome.output["status"] for outcome in outcomes] == ["Completed", "Completed"]
    second_history = [
        status for name, status in batch.transitions if name == service_job("trainstack-second-1")
    ]
    assert second_history[0] == "RUNNABLE" and second_history[-1] == "SUCCEEDED"
    # The second training job was created only after the first one had ended.
    first_end = batch.transitions.index((service_job("trainstack-first-1"), "SUCCEEDED"))
    assert batch.transitions.index((service_job("trainstack-second-1"), "SCHEDULED")) > first_end


def test_priorities_order_the_waiting_jobs(world):
    client, arn, batch, sagemaker, _ = world
    batch.weight_factors = {"research": 1.0}
    blocking(sagemaker)
    runs = [("blocker", 0), ("low", 1), ("high", 500)]
    executions = []
    for name, priority in runs:
        executions.append(
            start(client, arn, name, attempt_input(f"trainstack-{name}", priority=priority, share="research"))
        )
        wait_until(lambda name=name: submitted(batch, service_job(f"trainstack-{name}-1")))
    release(sagemaker, batch, service_job("trainstack-blocker-1"))
    assert [wait_for(execution).output["status"] for execution in executions] == ["Completed"] * 3
    assert started(batch) == [
        service_job("trainstack-blocker-1"),
        service_job("trainstack-high-1"),
        service_job("trainstack-low-1"),
    ]
    [high] = [job for job in batch.jobs.values() if job.name == service_job("trainstack-high-1")]
    assert (high.request["schedulingPriority"], high.request["shareIdentifier"]) == (500, "research")


def test_fair_share_gives_the_heavier_share_more_instances(world):
    client, arn, batch, sagemaker, _ = world
    batch.max_instances = 3
    batch.weight_factors = {"teamA": 0.5, "teamB": 1.0}  # config weights teamA: 2, teamB: 1
    blocking(sagemaker)
    plan = (
        [("blocker", 3, "teamB")]
        + [(f"a{i}", 1, "teamA") for i in range(2)]
        + [(f"b{i}", 1, "teamB") for i in range(2)]
    )
    executions = []
    for name, instances, share in plan:
        value = attempt_input(f"trainstack-{name}", instances=instances, share=share)
        executions.append(start(client, arn, name, value))
        wait_until(lambda name=name: submitted(batch, service_job(f"trainstack-{name}-1")))
    release(sagemaker, batch, service_job("trainstack-blocker-1"))
    for execution in executions:
        assert wait_for(execution).output["status"] == "Completed"
    # Once the blocker ended, three 1-instance jobs fit: teamA got two of them, teamB one.
    assert started(batch)[1:4] == [
        service_job("trainstack-a0-1"),
        service_job("trainstack-b0-1"),
        service_job("trainstack-a1-1"),
    ]


def test_capacity_error_is_retried_by_batch_with_the_same_checkpoint_prefix(world):
    client, arn, batch, sagemaker, _ = world
    sagemaker.behaviour.script([[CAPACITY_FAILURE], [STARTING, TRAINING, COMPLETED]])
    outcome = wait_for(start(client, arn, "run", attempt_input("trainstack-run")))
    assert outcome.output["status"] == "Completed", outcome.output
    assert [call for call, _ in batch.calls].count(
        "SubmitServiceJob"
    ) == 1  # no second submit by the pipeline
    first, second = sagemaker.created
    assert (
        first["CheckpointConfig"]["S3Uri"]
        == second["CheckpointConfig"]["S3Uri"]
        == ("s3://trainstack-checkpoints/trainstack-run/")
    )
    assert outcome.output["job"]["name"] == second["TrainingJobName"]


def test_capacity_wait_over_the_queue_limit_ends_the_attempt_as_capacity(world):
    client, arn, batch, sagemaker, _ = world
    batch.capacity_wait_seconds = 1800
    sagemaker.behaviour.script([[STARTING, STARTING, STARTING, CAPACITY_FAILURE]])
    outcome = wait_for(start(client, arn, "run", attempt_input("trainstack-run")))
    assert outcome.output["status"] == "Capacity"
    assert "capacity_wait_hours" in outcome.output["cause"]
    assert len(sagemaker.created) > 1  # Batch tried again before giving up


def test_training_failure_is_reported_with_its_reason(world):
    client, arn, batch, sagemaker, _ = world
    sagemaker.behaviour.script([[STARTING, failed("AlgorithmError: loss is nan")]])
    outcome = wait_for(start(client, arn, "run", attempt_input("trainstack-run")))
    assert outcome.output["status"] == "Failed"
    [name] = batch.training_jobs_of(service_job("trainstack-run-1"))
    assert outcome.output["cause"] == f"Training job {name} failed: AlgorithmError: loss is nan"
