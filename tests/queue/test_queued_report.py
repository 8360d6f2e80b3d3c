"""`trainstack report` in queue mode: the synthesized pipeline submits the attempt to the fake Batch, which
holds it while another run uses the instances, starts the training job under its own name, and starts it
again after a capacity error. The report shows the training job Batch started and the attempt's waits,
and, with `trainstack status`, bills every training job Batch started, as the pipeline's cost cap does."""

from __future__ import annotations

import re

import boto3
import pytest
import yaml

from localaws.sagemaker import BILLED_TRAINING, CAPACITY_FAILURE, COMPLETED, STARTING, TRAINING
from tests.conftest import default_config_data
from tests.pipeline import harness
from tests.pipeline.test_scenarios import assigned
from tests.queue.conftest import service_job
from tests.queue.test_queue_pipeline import (  # noqa: F401 (fifo_pipeline: a fixture)
    FIFO,
    fifo_pipeline,
    queue_for,
    release_first_job,
)
from tests.queue.test_queued_cost_cap import LOST_AFTER_BILLING
from trainstack.cli import main as trainstack
from trainstack.prices import offline_training_prices
from trainstack.report.collect import collect
from trainstack.report.goodput import LOST, ledger_of
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
        report = _collect(queue, RUN)

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
        # A row per training job Batch started: the lost one never billed.
        assert f"{lost} (service job {service_job(f'{RUN}-1')}, Batch job 1 of 2)" in page
        assert f"{finished} (service job {service_job(f'{RUN}-1')}, Batch job 2 of 2)" in page
        assert "back in the queue: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY" in page
    finally:
        context.__exit__(None, None, None)


def _collect(queue, run: str):
    stepfunctions = boto3.client("stepfunctions", region_name=harness.REGION)
    report = collect(
        stepfunctions,
        boto3.client("sagemaker", region_name=harness.REGION),
        boto3.client("logs", region_name=harness.REGION),
        latest_execution(stepfunctions, queue.pipeline_arn, run),
        "trainstack",
        boto3.client("batch", region_name=harness.REGION),
        queue.batch.queue_name,
    )
    report.prices = offline_training_prices(harness.REGION)  # as trainstack.commands.report.collect_run
    return report


def _billed_usd(name: str) -> float:
    """BillableTimeInSeconds x instances x the hourly price of the type SageMaker selected."""
    job = boto3.client("sagemaker", region_name=harness.REGION).describe_training_job(TrainingJobName=name)
    resources = job["ResourceConfig"]
    hourly = offline_training_prices(harness.REGION).hourly_usd(resources["SelectedInstanceType"])
    return job["BillableTimeInSeconds"] * resources["SelectedInstanceCount"] * hourly / 3600


def _cap_line_usd(text: str) -> float:
    [billed] = re.findall(r"billed \$([0-9,.]+) of the \$300\.00 cost cap", text)
    return float(billed.replace(",", ""))


def test_status_and_the_report_bill_every_training_job_batch_started(
    fifo_pipeline,  # noqa: F811
    monkeypatch,
    tmp_path,
    capsys,
):
    # Batch's first training job bills ~7 minutes and loses its capacity; Batch starts a second one, which
    # completes. llama-1b-smddp caps the run at $300 (config/default.yaml).
    scripts = [LOST_AFTER_BILLING, [STARTING] + [BILLED_TRAINING] * 4 + [COMPLETED]]
    context, queue = queue_for(fifo_pipeline, monkeypatch, scripts)
    queue.sagemaker.now = queue.batch.now  # TrainingStartTime/EndTime on the interpreter's clock
    run = "trainstack-requeued"
    try:
        outcome = harness.wait_for(queue.start(run, {"runName": run, "profile": "llama-1b-smddp"}))
        assert outcome.status == "SUCCEEDED", outcome.cause
        lost, finished = queue.batch.training_jobs_of(service_job(f"{run}-1"))
        first, second = _billed_usd(lost), _billed_usd(finished)
        assert first > 2 * second > 0  # each job's figure tells which jobs a total counts
        # The pipeline's spend after the attempt counts both (tests/queue/test_queued_cost_cap.py).
        assert assigned(outcome, "RunAttempt", "spentUsd") == [pytest.approx(first + second)]

        config = tmp_path / "queue.yaml"
        config.write_text(yaml.safe_dump({**default_config_data(), "queue": FIFO}))
        options = ["--config", str(config), "--state-machine-arn", queue.pipeline_arn]
        assert trainstack(["status", run, *options]) == 0
        status = capsys.readouterr().out
        assert _cap_line_usd(status) == pytest.approx(first + second, abs=0.005)

        report = _collect(queue, run)
        report.max_cost_usd = 300.0
        [attempt] = report.attempts
        assert [job.job_name for job in attempt.training_jobs] == [lost, finished]
        assert report.cost_usd == pytest.approx(first + second)
        ledger = ledger_of(report, report.execution["stopDate"])
        assert ledger.billed_usd == pytest.approx(first + second)
        earlier, latest = ledger.attempts
        assert [row.label for row in ledger.attempts] == ["attempt 1, Batch job 1", "attempt 1, Batch job 2"]
        assert [row.usd(row.billed_ms) for row in ledger.attempts] == [
            pytest.approx(first),
            pytest.approx(second),
        ]
        assert all(sum(row.parts_ms.values()) == row.billed_ms for row in ledger.attempts)
        # No checkpoint the second job resumed from: Batch's capacity loss lost all the first job trained.
        assert earlier.parts_ms[LOST] == earlier.billed_ms

        out = tmp_path / "run.html"
        assert trainstack(["report", run, *options, "--out", str(out)]) == 0
        page = out.read_text()
        summary = re.search(r'<p id="goodput-summary">(.*?)</p>', page).group(1)
        assert _cap_line_usd(summary) == pytest.approx(first + second, abs=0.005)
        assert f"Estimated cost</dt><dd>${first + second:,.2f}</dd>" in page
        for name, usd in ((lost, first), (finished, second)):
            assert f"<td>{name} (service job {service_job(f'{run}-1')}, Batch job" in page
            assert f"<td>${usd:,.2f}</td>" in page
    finally:
        context.__exit__(None, None, None)
