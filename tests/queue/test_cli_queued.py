"""What teams see in queue mode: `trainstack status`/`runs` show a waiting job as queued, with its place;
once Batch started it, `status`, `logs` and `stop` act on the training job Batch named itself."""

from __future__ import annotations

import json
import time

import boto3
import pytest
import yaml

from localaws.emulator.batch_routes import install_fake_batch
from localaws.emulator.fake_batch import FakeBatch
from localaws.sagemaker import STARTING, TRAINING, scripted_sagemaker
from tests.aws_fixtures import KEEPS_RUNNING, REGION, pipeline
from tests.conftest import default_config_data
from tests.queue.conftest import install_fake_sagemaker, service_job
from tests.queue.test_fake_batch import payload
from trainstack.cli import main


@pytest.fixture
def queued_world(aws, monkeypatch, tmp_path):
    """A running pipeline execution of run trainstack-mine whose job waits behind two others."""
    config = default_config_data()
    config["queue"] = {"enabled": True, "max_instances": 2}
    path = tmp_path / "queue.yaml"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("TRAINSTACK_CONFIG", str(path))
    sagemaker = scripted_sagemaker(job_scripts=[[STARTING, TRAINING]])
    batch = FakeBatch(sagemaker=sagemaker, max_instances=2)
    install_fake_batch(batch, monkeypatch)
    install_fake_sagemaker(sagemaker, monkeypatch)
    client = boto3.client("batch", region_name=REGION)
    for name in (
        service_job("trainstack-other-1"),
        service_job("trainstack-next-1"),
        service_job("trainstack-mine-1"),
    ):
        client.submit_service_job(
            jobName=name,
            jobQueue="trainstack-training",
            serviceJobType="SAGEMAKER_TRAINING",
            serviceRequestPayload=payload(name),
        )
    arn = pipeline(KEEPS_RUNNING)
    boto3.client("stepfunctions", region_name=REGION).start_execution(
        stateMachineArn=arn, name="trainstack-mine", input=json.dumps({"runName": "trainstack-mine"})
    )
    return batch


def test_status_shows_the_waiting_job_as_queued_with_its_position(queued_world, capsys):
    assert main(["status", "trainstack-mine"]) == 0
    out = capsys.readouterr().out
    assert "job: attempt 1 | trainstack-mine-1 | queued, position 2" in out


def test_runs_lists_the_waiting_job_as_queued(queued_world, capsys):
    assert main(["runs"]) == 0
    [row] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("trainstack-mine ")]
    assert "trainstack-mine-1 (queued, position 2)" in row


def test_once_batch_starts_the_job_the_training_job_is_shown(queued_world, capsys):
    batch = queued_world
    batch.max_instances = 6  # room for every job: Batch starts them on its next pass
    batch.describe({"jobId": next(iter(batch.jobs))})
    [name] = batch.training_jobs_of(service_job("trainstack-mine-1"))
    assert name.startswith("AWSBatch" + service_job("trainstack-mine-1"))  # Batch's name, not the request's
    assert main(["status", "trainstack-mine"]) == 0
    out = capsys.readouterr().out
    job_lines = [line for line in out.splitlines() if not line.startswith("goodput:")]  # waits by kind
    assert not [line for line in job_lines if "queued" in line] and f"attempt 1 | {name} | InProgress" in out


def test_logs_and_stop_find_the_training_job_batch_started(queued_world, capsys):
    batch = queued_world
    batch.max_instances = 6
    batch.describe({"jobId": next(iter(batch.jobs))})
    [name] = batch.training_jobs_of(service_job("trainstack-mine-1"))
    logs = boto3.client("logs", region_name=REGION)
    logs.create_log_group(logGroupName="/aws/sagemaker/TrainingJobs")
    logs.create_log_stream(logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=f"{name}/algo-1-1")
    logs.put_log_events(
        logGroupName="/aws/sagemaker/TrainingJobs",
        logStreamName=f"{name}/algo-1-1",
        logEvents=[{"timestamp": int(time.time() * 1000), "message": "step 1 loss 2.5"}],
    )
    assert main(["logs", "trainstack-mine"]) == 0
    assert "algo-1-1  step 1 loss 2.5" in capsys.readouterr().out
    assert main(["stop", "trainstack-mine"]) == 0
    assert f"stops training job {name} (attempt 1)" in capsys.readouterr().out
