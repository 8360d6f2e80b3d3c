"""The demos' SageMaker stands in on the emulator's clock: on AWS every service stamps the same time, so a
job's CreationTime, TrainingStartTime/EndTime and log lines are on the clock of the Step Functions history
the report draws them against (issue 49: attempt 1 spanned 8 emulated minutes and billed 0:00:17 real
seconds). No training process runs here."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import boto3
import pytest
from moto import mock_aws

from localaws.demo.local_logs import publish
from localaws.emulator import ScaledClock
from localaws.sagemaker.local_processes import LocalTraining, serving
from trainstack.runs import TRAINING_LOG_GROUP

HOUR = 3600.0


class HourAhead(ScaledClock):
    """An emulator clock an hour ahead of real time, as a demo's 30x clock is after two real minutes."""

    def __init__(self) -> None:
        super().__init__(speedup=1)

    def at_real(self, real_seconds: float) -> float:
        return real_seconds + HOUR


def test_a_local_jobs_times_are_read_on_the_emulators_clock(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    training = LocalTraining(tmp_path, tmp_path)
    with mock_aws(), serving(training, monkeypatch, HourAhead()) as sagemaker:
        # CreationTime (the fake's now), TrainingEndTime and FinalMetricDataList's stamps (clock_time).
        assert sagemaker.now() - time.time() == pytest.approx(HOUR, abs=60)
        assert training.clock_time() - time.time() == pytest.approx(HOUR, abs=60)
    with mock_aws(), serving(LocalTraining(tmp_path, tmp_path), monkeypatch) as real_time:
        assert real_time.now() == pytest.approx(time.time(), abs=60)


def test_a_jobs_log_lines_are_stamped_on_the_emulators_clock(tmp_path):
    log = tmp_path / "job.log"
    written = datetime(2026, 12, 5, 18, 0, 0, 250_000).astimezone()  # logging's asctime: local time
    lines = [f"{written:%Y-%m-%d %H:%M:%S},250 INFO step=5 loss=3.1", "no stamp of its own"]
    log.write_text("\n".join(lines) + "\n")
    created = datetime.fromtimestamp(written.timestamp() - 60 + HOUR, UTC)
    with mock_aws():
        logs = boto3.client("logs", region_name="us-east-1")
        publish(logs, "job-1", created, log, HourAhead().at_real)
        events = logs.filter_log_events(logGroupName=TRAINING_LOG_GROUP)["events"]
    stamp = round((written.timestamp() + HOUR) * 1000)
    assert [(event["timestamp"], event["message"]) for event in events] == [
        (stamp, lines[0]),
        (stamp + 1, lines[1]),
    ]
