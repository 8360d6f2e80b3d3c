"""`trainstack report` in queue mode: the synthesized pipeline submits the attempt to the fake Batch, which
holds it while another run uses the instances, starts the training job under its own name, and starts it
again after a capacity error. The report shows the training job Batch started and the attempt's waits."""

from __future__ import annotations

import boto3
import yaml

from localaws.sagemaker import CAPACITY_FAILURE, COMPLETED, STARTING, TRAINING
from tests.conftest import default_config_data
from tests.pipeline import harness
from tests.queue.conftest import service_job
from tests.queue.test_queue_pipeline import (  # noqa: F401 (fifo_pipeline: a fixture)
    FIFO,
    fifo_pipeline,
    queue_for,
    release_first_job,
)
from trainstack.cli import main as trainstack
from trainstack.report.collect import collect
from trainstack.runs import latest_execution

RUN = "trainstack-queued"


def test_the_report_finds_the_job_batch_started_and_how_long_the_attempt_waited(
    fifo_pipeline,  # noqa: F811
    monkeypatch,
    tmp_path,
    capsys,
):
    # The other run holds the queue's 2 instances (training until this run is in the queue: a slow machine
    # may take longer to submit it than the other job takes to train); this run's first job loses capacity.
    scripts = [[STARTING, TRAINING], [CAPACITY_FAILURE], [STARTING, TRAINING, COMPLETED]]
    context, queue = queue_for(fifo_pipeline, monkeypatch, scripts)
    try:
        other = queue.start("other", {"runName": "trainstack-other"})
        queue.submitted(service_job("trainstack-other-1"))
        mine = queue.start(RUN, {"runName": RUN})
        queue.submitted(service_job(f"{RUN}-1"))
        release_first_job(queue)
        outcomes = [harness.wait_for(other), harness.wait_for(mine)]
        assert [outcome.status for outcome in outcomes] == ["SUCCEEDED", "SUCCEEDED"]
        stepfunctions = boto3.client("stepfunctions", region_name=harness.REGION)
        report = collect(
            stepfunctions,
            boto3.client("sagemaker", region_name=harness.REGION),
            boto3.client("logs", region_name=harness.REGION),
            latest_execution(stepfunctions, queue.pipeline_arn, RUN),
            "trainstack",
            boto3.client("batch", region_name=harness.REGION),
            queue.batch.queue_name,
        )

        [attempt] = report.attempts  # one submission: Batch started the training job twice
        lost, finished = queue.batch.training_jobs_of(service_job(f"{RUN}-1"))
        assert (attempt.job_name, attempt.status) == (finished, "Completed")
        assert finished.startswith("AWSBatch" + service_job(f"{RUN}-1"))
        assert attempt.service_job["jobName"] == service_job(f"{RUN}-1")
        assert attempt.instance_type == "ml.p5.48xlarge"
        waited, requeued = attempt.queue_waits
        assert waited.label == "waiting in the queue"
        assert requeued.label.startswith("back in the queue: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY")
        assert attempt.started <= waited.start < waited.end <= requeued.start <= requeued.end <= attempt.ended
        assert attempt.queue_wait_seconds == sum(
            (wait.end - wait.start).total_seconds() for wait in (waited, requeued)
        )
        assert attempt.queue_wait_seconds > 0  # it waited for the other run's job to end
        assert attempt.phases[:2] == [waited, requeued]  # drawn on the time axis

        config = tmp_path / "queue.yaml"
        config.write_text(yaml.safe_dump({**default_config_data(), "queue": FIFO}))
        out = tmp_path / "run.html"
        command = ["report", RUN, "--config", str(config), "--out", str(out)]
        assert trainstack([*command, "--state-machine-arn", queue.pipeline_arn]) == 0
        assert capsys.readouterr().out == f"wrote {out}: run {RUN}, 1 attempt(s), execution SUCCEEDED\n"
        page = out.read_text()
        assert f"{finished} (service job {service_job(f'{RUN}-1')})" in page and lost not in page
        assert "back in the queue: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY" in page
    finally:
        context.__exit__(None, None, None)
