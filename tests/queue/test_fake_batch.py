"""The scripted Batch itself, through boto3 and moto as the state machine reaches it: it must behave like
the Batch user guide says, or the pipeline's queue scenarios prove nothing."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from localaws.emulator.batch_jobs import TRAINING_JOB_NAMES
from localaws.emulator.batch_routes import install_fake_batch
from localaws.emulator.fake_batch import CAPACITY_TERMINATED, CAPACITY_WAITING, FakeBatch, FakeBatchError
from localaws.sagemaker import CAPACITY_FAILURE, COMPLETED, STARTING, TRAINING, Phase, scripted_sagemaker

ROLE = "arn:aws:iam::123456789012:role/trainstack-sagemaker"


def payload(name: str, instances: int = 2) -> str:
    return json.dumps(
        {
            "TrainingJobName": name,
            "RoleArn": ROLE,
            "AlgorithmSpecification": {
                "TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/t:1",
                "TrainingInputMode": "File",
            },
            "OutputDataConfig": {"S3OutputPath": "s3://artifacts/run/"},
            "CheckpointConfig": {"S3Uri": f"s3://checkpoints/{name.rsplit('-', 1)[0]}/"},
            "ResourceConfig": {
                "InstancePreferences": [
                    {"InstanceType": "ml.p5.48xlarge", "InstanceCount": instances},
                    {"InstanceType": "ml.p4de.24xlarge", "InstanceCount": instances},
                ],
                "VolumeSizeInGB": 100,
            },
            "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        }
    )


class Clock:
    def __init__(self) -> None:
        self.seconds = 1_000_000.0

    def __call__(self) -> float:
        return self.seconds


@pytest.fixture
def world(monkeypatch):
    """A boto3 batch client reaching a FakeBatch of 2 instances (FIFO), and the fakes."""
    for name, value in (
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
    ):
        monkeypatch.setenv(name, value)
    sagemaker = scripted_sagemaker(job_scripts=[[STARTING, TRAINING, COMPLETED]])
    clock = Clock()
    batch = FakeBatch(sagemaker=sagemaker, max_instances=2, now=clock)
    install_fake_batch(batch, monkeypatch)
    with mock_aws():
        yield boto3.client("batch"), batch, sagemaker, clock


def submit(client, name: str, instances: int = 2, **extra) -> str:
    return client.submit_service_job(
        jobName=name,
        jobQueue="trainstack-training",
        serviceJobType="SAGEMAKER_TRAINING",
        serviceRequestPayload=payload(f"trainstack-{name}-1", instances),
        **extra,
    )["jobId"]


def status(client, job_id: str) -> str:
    return client.describe_service_job(jobId=job_id)["status"]


def run_to_end(client, job_id: str) -> list[str]:
    seen = []
    while not seen or seen[-1] not in ("SUCCEEDED", "FAILED"):
        seen.append(status(client, job_id))
    return seen


def test_a_full_environment_keeps_the_second_job_runnable_until_the_first_ends(world):
    client, batch, sagemaker, _ = world
    first, second = submit(client, "first"), submit(client, "second")
    assert run_to_end(client, first) == ["SCHEDULED", "RUNNING", "SUCCEEDED"]
    # The second job's training job was created only when the first one's instances were free.
    assert list(sagemaker.jobs) == batch.training_jobs_of("first") + batch.training_jobs_of("second")
    assert run_to_end(client, second) == ["SCHEDULED", "RUNNING", "SUCCEEDED"]


def test_service_job_status_follows_the_training_jobs_status_as_the_user_guide_maps_it(world):
    client, _, sagemaker, _ = world
    sagemaker.behaviour.script(
        [
            [
                Phase("InProgress", "Pending"),
                Phase("InProgress", "Downloading"),
                Phase("InProgress", "Training"),
                Phase("InProgress", "Uploading"),
                COMPLETED,
            ]
        ]
    )
    job = submit(client, "mapped")
    assert run_to_end(client, job) == ["SCHEDULED", "STARTING", "RUNNING", "RUNNING", "SUCCEEDED"]


def test_waiting_job_is_runnable_and_started_in_order(world):
    client, batch, sagemaker, _ = world
    first = submit(client, "first")
    second = submit(client, "second")
    assert status(client, second) == "RUNNABLE"
    assert list(sagemaker.jobs) == batch.training_jobs_of("first")
    run_to_end(client, first)
    described = client.describe_service_job(jobId=second)
    [name] = batch.training_jobs_of("second")
    assert described["latestAttempt"]["serviceResourceId"] == {
        "name": "TrainingJobArn",
        "value": f"arn:aws:sagemaker:us-east-1:123456789012:training-job/{name.lower()}",
    }


def test_priorities_order_waiting_jobs_within_a_share(world):
    client, batch, sagemaker, _ = world
    batch.weight_factors = {"research": 1.0}
    running = submit(client, "running", shareIdentifier="research", schedulingPriority=0)
    low = submit(client, "low", shareIdentifier="research", schedulingPriority=1)
    high = submit(client, "high", shareIdentifier="research", schedulingPriority=500)
    assert [batch.jobs[job].name for job in map(str, batch.snapshot())] == ["high", "low"]
    run_to_end(client, running)
    assert (status(client, high), status(client, low)) == ("SCHEDULED", "RUNNABLE")


def test_fifo_queue_ignores_priority_as_aws_documents(world):
    client, batch, _, _ = world
    submit(client, "running")
    early = submit(client, "early", schedulingPriority=1)
    late = submit(client, "late", schedulingPriority=900)
    assert batch.snapshot() == [early, late]


def test_fair_share_gives_each_share_capacity_in_proportion_to_its_weight(world):
    client, batch, sagemaker, _ = world
    batch.max_instances = 3
    batch.weight_factors = {"teamA": 0.5, "teamB": 1.0}  # teamA weight 2, teamB weight 1
    blocker = submit(client, "blocker", instances=3, shareIdentifier="teamB")
    for index in range(4):
        submit(client, f"a{index}", instances=1, shareIdentifier="teamA")
    for index in range(4):
        submit(client, f"b{index}", instances=1, shareIdentifier="teamB")
    run_to_end(client, blocker)
    running = sorted(job.share for job in batch.jobs.values() if job.status == "SCHEDULED")
    assert running == ["teamA", "teamA", "teamB"]


def test_capacity_error_sends_the_job_back_to_runnable_and_batch_starts_it_again(world):
    client, batch, sagemaker, _ = world
    sagemaker.behaviour.script([[CAPACITY_FAILURE], [STARTING, TRAINING, COMPLETED]])
    job = submit(client, "run")
    assert status(client, job) == "RUNNABLE"  # the training job failed with CapacityError
    assert client.describe_service_job(jobId=job)["statusReason"] == CAPACITY_WAITING
    assert run_to_end(client, job)[-1] == "SUCCEEDED"
    first, second = sagemaker.created
    assert first["CheckpointConfig"] == second["CheckpointConfig"]
    attempts = client.describe_service_job(jobId=job)["attempts"]
    assert [attempt.get("statusReason") for attempt in attempts] == [CAPACITY_WAITING, None]
    assert batch.jobs[job].retries_left == 0  # capacity retries use no retryStrategy attempt


@pytest.mark.parametrize("terminated", [False, True])
def test_attempts_list_every_training_job_batch_started_as_botocore_models_them(world, terminated):
    """DescribeServiceJob's `attempts` (ServiceJobAttemptDetail: serviceResourceId {name: TrainingJobArn,
    value}, startedAt, stoppedAt, statusReason; Unix milliseconds), oldest first; latestAttempt names the
    last. Each attempt stops when its training job ends, or when the job is terminated."""
    client, batch, sagemaker, clock = world
    sagemaker.behaviour.script(
        [[STARTING, TRAINING, CAPACITY_FAILURE], [STARTING, TRAINING, TRAINING, COMPLETED]]
    )
    job = submit(client, "run")
    seen = [status(client, job)]
    while seen[-1] != "RUNNING" or len(batch.training_jobs_of("run")) < 2:
        clock.seconds += 60
        seen.append(status(client, job))
    clock.seconds += 60
    if terminated:
        client.terminate_service_job(jobId=job, reason="Execution aborted")
    seen += run_to_end(client, job)
    described = client.describe_service_job(jobId=job)
    arns = [sagemaker.describe(name)["TrainingJobArn"] for name in batch.training_jobs_of("run")]
    assert [attempt["serviceResourceId"] for attempt in described["attempts"]] == [
        {"name": "TrainingJobArn", "value": arn} for arn in arns
    ]
    assert described["latestAttempt"] == {"serviceResourceId": described["attempts"][-1]["serviceResourceId"]}
    first, second = described["attempts"]
    assert first["startedAt"] < first["stoppedAt"] < second["startedAt"] < second["stoppedAt"]
    assert first["statusReason"] == CAPACITY_WAITING
    assert second["stoppedAt"] == described["stoppedAt"]
    assert seen[-1] == ("FAILED" if terminated else "SUCCEEDED")


def test_capacity_wait_beyond_the_time_limit_terminates_the_job(world):
    client, batch, sagemaker, clock = world
    batch.capacity_wait_seconds = 3600
    sagemaker.behaviour.script([[Phase("InProgress", "Starting"), CAPACITY_FAILURE]])
    job = submit(client, "run")
    for _ in range(6):
        clock.seconds += 900
        if status(client, job) == "FAILED":
            break
    described = client.describe_service_job(jobId=job)
    assert (described["status"], described["statusReason"], described["isTerminated"]) == (
        "FAILED",
        CAPACITY_TERMINATED,
        True,
    )


def test_terminating_a_runnable_job_creates_no_training_job(world):
    client, batch, sagemaker, _ = world
    submit(client, "running")
    waiting = submit(client, "waiting")
    client.terminate_service_job(jobId=waiting, reason="Execution aborted")
    described = client.describe_service_job(jobId=waiting)
    assert (described["status"], described["statusReason"], described["isTerminated"]) == (
        "FAILED",
        "Execution aborted",
        True,
    )
    assert batch.training_jobs_of("waiting") == []


def test_terminating_a_running_job_stops_its_training_job(world):
    client, batch, sagemaker, _ = world
    job = submit(client, "running")
    client.terminate_service_job(jobId=job, reason="Execution aborted")
    assert sagemaker.stop_requests == batch.training_jobs_of("running")
    assert batch.in_use() == 0


def test_list_service_jobs_by_status_and_name(world):
    client, _, _, _ = world
    running, waiting = submit(client, "running"), submit(client, "waiting")
    runnable = client.list_service_jobs(jobQueue="trainstack-training", jobStatus="RUNNABLE")[
        "jobSummaryList"
    ]
    assert [summary["jobId"] for summary in runnable] == [waiting]
    named = client.list_service_jobs(filters=[{"name": "JOB_NAME", "values": ["running"]}])["jobSummaryList"]
    assert [summary["jobId"] for summary in named] == [running]


def test_unknown_job_and_server_side_rules_are_client_exceptions(world):
    client, batch, _, _ = world
    with pytest.raises(client.exceptions.ClientException):
        client.describe_service_job(jobId="0d2b0a7e-0000-0000-0000-000000000000")
    with pytest.raises(client.exceptions.ClientException, match="schedulingPriority"):
        submit(client, "urgent", schedulingPriority=10_000)
    with pytest.raises(client.exceptions.ClientException, match="shareIdentifier"):
        submit(client, "shared", shareIdentifier="teamA")
    with pytest.raises(FakeBatchError, match="Missing required parameter"):
        batch.submit({"jobName": "x", "jobQueue": "trainstack-training", "serviceRequestPayload": "{}"})


@pytest.mark.parametrize("naming", TRAINING_JOB_NAMES)
def test_training_jobs_are_named_as_each_alternative_says(world, naming):
    client, batch, sagemaker, _ = world
    batch.training_job_names = naming
    sagemaker.behaviour.script([[CAPACITY_FAILURE], [STARTING, COMPLETED]])
    name = "a" * 45 if naming == "truncated" else "run"  # too long for SageMaker unless truncated
    run_to_end(client, submit(client, name))
    first, second = batch.training_jobs_of(name)
    if naming == "payload":
        assert (first, second) == (f"trainstack-{name}-1", f"trainstack-{name}-1-b1")
    else:
        # AWSBatch<jobName><attemptId>: Batch's guide shows the form; the attempt id's is assumed.
        assert first.startswith(f"AWSBatch{name}") and first != second
        assert len(first) == (63 if naming == "truncated" else len(f"AWSBatch{name}") + 32)


def test_list_service_jobs_pages_with_next_token(world):
    client, batch, _, _ = world
    batch.page_size = 2
    jobs = [submit(client, f"job{index}", instances=1) for index in range(5)]
    pages, token = [], None
    while True:
        answer = client.list_service_jobs(
            jobQueue="trainstack-training", **({"nextToken": token} if token else {})
        )
        pages.append([summary["jobId"] for summary in answer["jobSummaryList"]])
        token = answer.get("nextToken")
        if not token:
            break
    assert pages == [jobs[4:2:-1], jobs[2:0:-1], jobs[:1]]  # newest first, 2 per page
