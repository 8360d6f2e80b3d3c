"""The report page of runs the emulator does not produce: SageMaker's phases of a job (its capacity wait
in Starting), a run still going, an instance type without a recorded price."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from trainstack.prices import offline_training_prices
from trainstack.report.collect import Attempt, RunReport, job_phases
from trainstack.report.render import render, tensorboard_command

START = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return START + timedelta(minutes=minutes)


def job(instance_type: str, **fields) -> dict:
    return {
        "TrainingJobStatus": "InProgress",
        "ResourceConfig": {"InstanceType": instance_type, "InstanceCount": 2},
        "TrainingStartTime": at(30),
        **fields,
    }


def test_sagemaker_phases_show_under_their_attempt_and_cost_follows_billable_time():
    described = job(
        "ml.p4d.24xlarge",
        TrainingJobStatus="Completed",
        TrainingEndTime=at(90),
        BillableTimeInSeconds=1800,  # spot: half the training time
        TensorBoardOutputConfig={
            "S3OutputPath": "s3://artifacts/trainstack-run/tensorboard/trainstack-run-1/"
        },
        SecondaryStatusTransitions=[
            {"Status": "Starting", "StartTime": at(2), "EndTime": at(30), "StatusMessage": "Preparing"},
            {"Status": "Training", "StartTime": at(30), "EndTime": at(88)},
            {"Status": "Uploading", "StartTime": at(88)},  # no EndTime yet: not drawn
        ],
    )
    attempt = Attempt(1, "trainstack-run-1", started=at(1), ended=at(91), job=described)
    attempt.phases = job_phases(described)
    assert [(p.label, p.start, p.end) for p in attempt.phases] == [
        ("Starting", at(2), at(30)),
        ("Training", at(30), at(88)),
    ]
    prices = offline_training_prices("us-east-1")
    hourly = prices.hourly_usd("ml.p4d.24xlarge")
    assert attempt.cost_usd(prices) == hourly * 2 * 0.5  # on demand, 2 instances, half an hour billed
    report = RunReport(
        "trainstack-run",
        {
            "executionArn": "arn:aws:states:us-east-1:1:execution:p:r",
            "status": "SUCCEEDED",
            "startDate": START,
            "stopDate": at(92),
        },
        [attempt],
        [],
        prices=prices,
    )
    page = render(report)
    assert "<title>Starting</title>" in page and "<title>Training</title>" in page
    assert f"${hourly:,.2f}" in page and "<script" not in page
    assert f"ml.p4d.24xlarge ${hourly:,.3f}/h as of 2026-09-01" in page  # the price, its region and date
    assert "tensorboard --logdir s3://artifacts/trainstack-run/tensorboard/trainstack-run-1/" in page


def test_a_running_attempt_and_an_unpriced_type_say_what_is_unknown():
    running = Attempt(1, "trainstack-run-1", started=at(1), ended=None, job=job("ml.p5e.48xlarge"))
    report = RunReport(
        "trainstack-run",
        {"executionArn": "arn:aws:states:us-east-1:1:execution:p:r", "status": "RUNNING", "startDate": START},
        [running],
        [],
        prices=offline_training_prices("us-east-1"),
    )
    assert running.billed_seconds is None and report.cost_usd is None
    page = render(report)
    assert "unknown (an instance type has no recorded price)" in page
    assert "no price for ml.p5e.48xlarge in us-east-1" in page
    assert "<dt>Stopped</dt><dd>running</dd>" in page
    assert "No loss values in the jobs' logs." in page


def test_tensorboard_opens_every_attempt_as_a_run_of_its_own():
    attempts = [
        Attempt(n, f"trainstack-run-{n}", started=at(n), ended=at(n + 1), job=job("ml.p5.48xlarge", **board))
        for n, board in (
            (1, {"TensorBoardOutputConfig": {"S3OutputPath": "s3://a/run/tensorboard/trainstack-run-1/"}}),
            (2, {}),  # a job created without TensorBoardOutputConfig
            (3, {"TensorBoardOutputConfig": {"S3OutputPath": "s3://a/run/tensorboard/trainstack-run-3/"}}),
        )
    ]
    assert tensorboard_command(attempts) == (
        "tensorboard --logdir_spec attempt1:s3://a/run/tensorboard/trainstack-run-1/,"
        "attempt3:s3://a/run/tensorboard/trainstack-run-3/"
    )
    assert tensorboard_command(attempts[1:2]) is None
