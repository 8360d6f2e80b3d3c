"""`trainstack report` on a run of the synthesized pipeline in the emulator: a capacity loss, a back-off, a
resumed attempt. The jobs' log lines are put into CloudWatch Logs as SageMaker would deliver them."""

from __future__ import annotations

import contextlib
import re
from datetime import UTC, datetime, timedelta
from html import escape

import boto3
import pytest

from localaws.sagemaker import CAPACITY_FAILURE, COMPLETED, STARTING, TRAINING, Phase
from tests.pipeline import harness
from training_scripts.metrics import (
    format_checkpoint_pause_line,
    format_slow_host_line,
    format_train_line,
    format_val_line,
)
from trainstack.cli import main as trainstack
from trainstack.cost_cap import usd
from trainstack.prices import offline_training_prices
from trainstack.report.collect import collect
from trainstack.runs import TRAINING_LOG_GROUP, latest_execution

RUN = "trainstack-report"
LOGS = {
    f"{RUN}-1": [
        "Training tiny on 2 ranks ...",
        format_train_line(10, 30, 5.5, 1.2, 3e-3, 2000.0, None),
        format_train_line(20, 30, 4.5, 1.1, 2e-3, 2100.0, None),
        "Saved checkpoint /opt/ml/checkpoints/step_000000020.",
    ],
    f"{RUN}-2": [
        "Resumed from /opt/ml/checkpoints/step_000000020 (step 20).",
        format_train_line(30, 30, 3.5, 0.9, 1e-3, 2200.0, 0.42),
        format_val_line(30, 3.75),
    ],
}


def deliver_logs() -> None:
    logs = boto3.client("logs", region_name=harness.REGION)
    logs.create_log_group(logGroupName=TRAINING_LOG_GROUP)
    for job, lines in LOGS.items():
        stream = f"{job}/algo-1-{int(datetime.now(UTC).timestamp())}"
        logs.create_log_stream(logGroupName=TRAINING_LOG_GROUP, logStreamName=stream)
        # Now: CloudWatch Logs rejects events older than 14 days.
        now = int(datetime.now(UTC).timestamp() * 1000)
        events = [{"timestamp": now + i, "message": line} for i, line in enumerate(lines)]
        logs.put_log_events(logGroupName=TRAINING_LOG_GROUP, logStreamName=stream, logEvents=events)


@pytest.mark.filterwarnings("ignore:Exception\\(ServiceError\\) with code ThrottlingException")
def test_the_report_reads_attempts_backoffs_jobs_and_metrics_of_a_run(interpreter):
    # The first create is throttled 3 times: it and its two quick retries fail, the attempt waits once.
    sm = interpreter(
        job_scripts=[[CAPACITY_FAILURE], [STARTING, TRAINING, COMPLETED]], throttles={"CreateTrainingJob": 3}
    )
    outcome = sm.run({"profile": "nccl-test", "runName": RUN}, name=RUN)
    assert outcome.status == "SUCCEEDED", outcome.cause
    deliver_logs()
    stepfunctions = boto3.client("stepfunctions", region_name=harness.REGION)
    execution = latest_execution(stepfunctions, sm.pipeline_arn, RUN)
    report = collect(
        stepfunctions,
        boto3.client("sagemaker", region_name=harness.REGION),
        boto3.client("logs", region_name=harness.REGION),
        execution,
        "trainstack",
    )

    first, second = report.attempts
    assert (first.job_name, first.status) == (f"{RUN}-1", "Failed")
    assert first.job["FailureReason"].startswith("CapacityError")
    assert (second.job_name, second.status) == (f"{RUN}-2", "Completed")
    assert first.started < first.ended < report.backoffs[0].start < report.backoffs[0].end <= second.started
    # The back-off lasted what the pipeline's Wait state asked the clock for.
    backoff = (report.backoffs[0].end - report.backoffs[0].start).total_seconds()
    assert backoff > 0 and round(backoff) in sm.clock.waits
    assert first.job_created and first.started <= first.job_created <= first.ended
    (throttled,) = first.phases
    assert throttled.label == "CreateTrainingJob throttled" and throttled.end <= first.job_created
    assert round((throttled.end - throttled.start).total_seconds()) in sm.clock.waits
    assert second.phases == []  # the scripted SageMaker reports no SecondaryStatusTransitions
    assert first.resumed_from is None and second.resumed_from == ("/opt/ml/checkpoints/step_000000020", 20)
    checkpoints = second.job["CheckpointConfig"]["S3Uri"].rstrip("/")
    assert second.resumed_checkpoint == f"{checkpoints}/step_000000020"  # where SageMaker synced it
    assert first.metrics["train:loss"] == [(10, 5.5), (20, 4.5)]
    assert second.metrics == {
        "train:loss": [(30, 3.5)],
        "validation:loss": [(30, 3.75)],
        "train:grad_norm": [(30, 0.9)],
        "train:tokens_per_second": [(30, 2200.0)],
        "train:mfu_percent": [(30, 42.0)],
    }
    assert second.instance_type and second.instance_count >= 1
    # The scripted SageMaker reports no TrainingStartTime/EndTime nor BillableTimeInSeconds: no cost.
    assert report.cost_usd is None


def test_the_command_writes_one_page_and_names_a_missing_run_or_folder(interpreter, tmp_path, capsys):
    sm = interpreter(job_scripts=[[CAPACITY_FAILURE], [STARTING, COMPLETED]])
    deliver_logs()
    sm.run({"profile": "nccl-test", "runName": RUN}, name=RUN)
    out = tmp_path / "run.html"
    common = ["--state-machine-arn", sm.pipeline_arn, "--region", harness.REGION]

    assert trainstack(["report", RUN, "--out", str(out), *common]) == 0
    assert capsys.readouterr().out == f"wrote {out}: run {RUN}, 2 attempt(s), execution SUCCEEDED\n"
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and f"{RUN}-1" in page and f"{RUN}-2" in page
    assert '<svg id="timeline"' in page and "<script" not in page

    assert trainstack(["report", "trainstack-nothing", "--out", str(out), *common]) == 1
    assert capsys.readouterr().err.startswith("trainstack report: no run named trainstack-nothing in ")
    missing = tmp_path / "absent" / "run.html"
    assert trainstack(["report", RUN, "--out", str(missing), *common]) == 2
    assert capsys.readouterr().err == (
        f"trainstack report: --out {missing}: the folder {missing.parent} does not exist.\n"
    )


GOODPUT_RUN = "trainstack-goodput"


def billed_job(base: datetime) -> Phase:
    """Completed on 2 instances: billed from minute 2 to 32, Training from minute 3 to 30, then Uploading."""

    def at(minutes: float) -> float:
        return (base + timedelta(minutes=minutes)).timestamp()

    return Phase(
        "Completed",
        "Completed",
        fields={
            "CreationTime": at(0),
            "TrainingStartTime": at(2),
            "TrainingEndTime": at(32),
            "SecondaryStatusTransitions": [
                {"Status": "Starting", "StartTime": at(0), "EndTime": at(3)},
                {"Status": "Training", "StartTime": at(3), "EndTime": at(30)},
                {"Status": "Uploading", "StartTime": at(30), "EndTime": at(32)},
            ],
        },
    )


def test_status_prints_the_goodput_line_and_the_report_draws_its_bars(interpreter, tmp_path, capsys):
    base = datetime.now(UTC) - timedelta(hours=1)  # CloudWatch Logs rejects events older than 14 days
    sm = interpreter(job_scripts=[[CAPACITY_FAILURE], [STARTING, TRAINING, billed_job(base)]])
    sm.run({"profile": "nccl-test", "runName": GOODPUT_RUN}, name=GOODPUT_RUN)
    # The loop starts at minute 5 and stands still 60 s for a checkpoint at minute 15.
    deliver(
        f"{GOODPUT_RUN}-2",
        [
            (base + timedelta(minutes=5), "Training tiny on 16 ranks (cuda, fsdp): global batch 64 ..."),
            (base + timedelta(minutes=14), format_train_line(100, 200, 3.5, 0.9, 1e-3, 2200.0, 0.42)),
            (base + timedelta(minutes=16), format_checkpoint_pause_line(100, 60.0)),
            (base + timedelta(minutes=17), "Saved checkpoint /opt/ml/checkpoints/step_000000100."),
            (base + timedelta(minutes=18), format_slow_host_line(9, "algo-2", 2.98, 3, 130, 2.0)),
        ],
    )
    common = ["--state-machine-arn", sm.pipeline_arn, "--region", harness.REGION]

    assert trainstack(["status", GOODPUT_RUN, *common]) == 0
    out = capsys.readouterr().out
    # Billed 30 minutes on 2 x ml.p5.48xlarge (attempt 1's capacity failure billed nothing): 3 starting
    # (minute 2 to 5), 2 uploading and the 1-minute pause saving, 24 kept.
    assert re.search(
        r"^goodput: 80\.0% \(0:48:00 of 1:00:00 billed instance time kept\); lost to failures: \$0\.00 "
        r"\(lost work 0:00:00, idle in a hang 0:00:00, restarts 0:00:00\); "
        r"waits \d:\d\d:\d\d \(not billed: back-offs \d:\d\d:\d\d, queued or provisioning "
        r"\d:\d\d:\d\d\)$",
        out,
        re.MULTILINE,
    ), out
    # The slow host train.py flagged, named with its host.
    slow = (
        f"slow host: attempt 2 ({GOODPUT_RUN}-2): rank 9 on algo-2, 2.98x the other ranks' median step "
        "share in 3 log intervals up to step 130"
    )
    assert slow in out.splitlines(), out
    page = tmp_path / "run.html"
    assert trainstack(["report", GOODPUT_RUN, "--out", str(page), *common]) == 0
    text = page.read_text()
    assert '<svg id="goodput"' in text and "goodput: 80.0%" in text
    assert escape(slow.split(": ", 2)[2]) in text  # in the attempt's row
    kept = 2 * 24 / 60 * offline_training_prices(harness.REGION).hourly_usd("ml.p5.48xlarge")
    assert f"<title>kept training: 0:24:00 x 2 instance(s) ({usd(kept)})</title>" in text


def deliver(job_name: str, lines: list[tuple[datetime, str]]) -> None:
    logs = boto3.client("logs", region_name=harness.REGION)
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_group(logGroupName=TRAINING_LOG_GROUP)
    stream = f"{job_name}/algo-1-{int(lines[0][0].timestamp())}"
    logs.create_log_stream(logGroupName=TRAINING_LOG_GROUP, logStreamName=stream)
    events = [{"timestamp": int(when.timestamp() * 1000), "message": line} for when, line in lines]
    logs.put_log_events(logGroupName=TRAINING_LOG_GROUP, logStreamName=stream, logEvents=events)
