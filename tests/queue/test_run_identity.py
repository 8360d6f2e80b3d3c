"""Queue mode knows a run by its execution, not by its name (issue 38): the synthesized pipeline and queue
cleanup in the local emulator against FakeBatch. An execution given another run's name never submits,
and its cleanup never takes that run's jobs down."""

from __future__ import annotations

import boto3
import pytest

from localaws.sagemaker import COMPLETED, STARTING, TRAINING
from tests.pipeline import harness
from tests.queue.conftest import RUN_NAMES, service_job
from tests.queue.test_queue_pipeline import (  # noqa: F401 (fifo_pipeline: a fixture)
    Queue,
    ended_event,
    fifo_pipeline,
    queue_for,
    release_first_job,
)


@pytest.fixture
def queue(fifo_pipeline, monkeypatch):  # noqa: F811
    """The FIFO queue of 2 instances; every training job runs until the test releases it."""
    context, queue = queue_for(fifo_pipeline, monkeypatch, [[STARTING, TRAINING]])
    yield queue
    context.__exit__(None, None, None)


def running(queue: Queue, run_name: str):
    """Start run `run_name` and wait until Batch runs its first service job; the execution and that job."""
    execution = queue.start(run_name.removeprefix("trainstack-"), {"runName": run_name})
    name = service_job(f"{run_name}-1")
    harness.wait_until(
        lambda: any(job.name == name and job.status == "RUNNING" for job in queue.batch.jobs.values())
    )
    [job] = [job for job in queue.batch.jobs.values() if job.name == name]
    return execution, job


def clean_up(queue: Queue, execution: str) -> None:
    """What the cleanup rule does when `execution` ended unsuccessfully."""
    cleanup = harness.wait_for(harness.start(queue.cleanup_arn, ended_event(execution), "cleanup"))
    assert cleanup.status == "SUCCEEDED", cleanup.cause


def submits_of(queue: Queue, run_name: str) -> list[str]:
    prefix = service_job(f"{run_name}-1")[:-1]
    return [
        call["jobName"]
        for operation, call in queue.batch.calls
        if operation == "SubmitServiceJob" and call["jobName"].startswith(prefix)
    ]


def test_an_invalid_execution_with_a_running_runs_name_leaves_that_run_alone(queue):
    """The attack: team B's run is RUNNING; an execution with B's run name and an invalid instanceCount
    fails, and its cleanup must not terminate B's service job (it ended B TrainingStopped before)."""
    b, job = running(queue, "trainstack-b")
    attack = harness.wait_for(queue.start("attack", {"runName": "trainstack-b", "instanceCount": 0}))
    assert (attack.status, attack.error) == ("FAILED", "InvalidInput")
    clean_up(queue, attack.execution_arn)
    assert (job.status, job.terminated) == ("RUNNING", False)
    assert not queue.sagemaker.stop_requests
    release_first_job(queue)
    outcome = harness.wait_for(b)
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert submits_of(queue, "trainstack-b") == [service_job("trainstack-b-1")]


def test_a_second_execution_reusing_a_run_name_fails_before_it_submits(queue):
    first, job = running(queue, "trainstack-shared")
    second = harness.wait_for(queue.start("second", {"runName": "trainstack-shared"}))
    # As without the queue (CreateTrainingJob's ResourceInUse): InvalidInput, the run and what to do.
    assert (second.status, second.error, second.cause) == (
        "FAILED",
        "InvalidInput",
        f"runName trainstack-shared is already used by pipeline execution {first}; choose another runName.",
    )
    assert submits_of(queue, "trainstack-shared") == [service_job("trainstack-shared-1")]
    clean_up(queue, second.execution_arn)
    assert (job.status, job.terminated) == ("RUNNING", False)
    release_first_job(queue)
    assert harness.wait_for(first).status == "SUCCEEDED"
    # The name stays the first run's once it ended, as a training job's name does.
    third = harness.wait_for(queue.start("third", {"runName": "trainstack-shared"}))
    assert (third.error, submits_of(queue, "trainstack-shared")) == (
        "InvalidInput",
        [service_job("trainstack-shared-1")],
    )
    item = boto3.client("dynamodb", region_name=harness.REGION).get_item(
        TableName=RUN_NAMES.name, Key={"runName": {"S": "trainstack-shared"}}
    )["Item"]
    assert item["execution"]["S"] == first


def test_the_runs_next_attempt_claims_its_own_name_again(queue):
    """A fault retry is attempt 2 of the same execution: it owns the name and submits `<run>-2`."""
    from tests.pipeline.test_fault_drills import NCCL

    queue.sagemaker.behaviour.script([[STARTING, TRAINING, NCCL], [STARTING, TRAINING, COMPLETED]])
    outcome = harness.wait_for(queue.start("faulty", {"runName": "trainstack-faulty"}))
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert submits_of(queue, "trainstack-faulty") == [
        service_job("trainstack-faulty-1"),
        service_job("trainstack-faulty-2"),
    ]
