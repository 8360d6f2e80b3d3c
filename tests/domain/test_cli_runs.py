"""A run's life through the CLI against moto: start (named after the run), runs, stop, logs."""

from __future__ import annotations

import json
import time

import boto3
import botocore.client

from tests.aws_fixtures import KEEPS_RUNNING, REGION, ROLE, SUCCEEDS, pipeline, training_job
from trainstack.cli import main


def ended(execution_arn: str) -> dict:
    """The execution once it has ended: moto runs it (and reflects a stop) on a thread of its own.

    Returns as soon as it has ended; the bound only turns a hang into a failure, on any machine load.
    """
    client = boto3.client("stepfunctions", region_name=REGION)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        execution = client.describe_execution(executionArn=execution_arn)
        if execution["status"] != "RUNNING":
            return execution
        time.sleep(0.05)
    raise AssertionError(f"{execution_arn} still running")


def test_start_names_the_execution_after_the_run_and_refuses_a_running_duplicate(aws, capsys):
    pipeline(KEEPS_RUNNING)
    assert main(["start", "--run-name", "trainstack-llama-v4"]) == 0
    first = capsys.readouterr().out.strip()
    assert first.endswith(":execution:trainstack-pipeline:trainstack-llama-v4")
    assert main(["start", "--run-name", "trainstack-llama-v4"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        f"trainstack start: run trainstack-llama-v4 already exists and is running ({first})"
    )
    assert "`trainstack stop trainstack-llama-v4`" in err


def test_starting_an_ended_run_again_resumes_it_as_its_next_execution(aws, capsys):
    pipeline(SUCCEEDS)
    assert main(["start", "--run-name", "trainstack-nightly"]) == 0
    ended(capsys.readouterr().out.strip())
    assert main(["start", "--run-name", "trainstack-nightly"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip().endswith(":execution:trainstack-pipeline:trainstack-nightly.2")
    assert "resumes from its checkpoints" in captured.err
    sent = json.loads(ended(captured.out.strip())["input"])
    assert sent["runName"] == "trainstack-nightly"


def test_runs_lists_recent_runs_with_their_current_job(aws, capsys):
    pipeline(KEEPS_RUNNING)
    main(["start", "--run-name", "trainstack-a", "--profile", "small-torchrun"])
    main(["start", "--run-name", "trainstack-b"])
    training_job("trainstack-b-1")
    training_job("trainstack-b-2")
    capsys.readouterr()
    assert main(["runs"]) == 0
    header, *rows = capsys.readouterr().out.strip().splitlines()
    assert header.split() == ["RUN", "PROFILE", "STATUS", "ATTEMPT", "JOB", "INSTANCES", "ELAPSED"]
    by_run = {row.split()[0]: row.split() for row in rows}
    assert by_run["trainstack-b"][1:5] == ["llama-7b-smp", "RUNNING", "2", "trainstack-b-2"]
    assert "1 x ml.p5.48xlarge" in rows[0] + rows[1]
    assert by_run["trainstack-a"][1:5] == ["small-torchrun", "RUNNING", "-", "-"]


def test_stop_stops_the_execution_and_says_the_cleanup_stops_the_job(aws, capsys, monkeypatch):
    arn = pipeline(KEEPS_RUNNING)
    main(["start", "--run-name", "trainstack-c"])
    training_job("trainstack-c-1")
    capsys.readouterr()
    # moto reports every job Completed at once; on AWS the job of a running execution is InProgress.
    real_describe = botocore.client.BaseClient._make_api_call

    def in_progress(self, operation, params):
        answer = real_describe(self, operation, params)
        if operation == "DescribeTrainingJob":
            answer["TrainingJobStatus"] = "InProgress"
        return answer

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", in_progress)
    assert main(["stop", "trainstack-c"]) == 0
    out = capsys.readouterr().out
    assert "the pipeline's cleanup stops training job trainstack-c-1 (attempt 1)" in out
    client = boto3.client("stepfunctions", region_name=REGION)
    [item] = client.list_executions(stateMachineArn=arn)["executions"]
    assert ended(item["executionArn"])["status"] == "ABORTED"
    assert main(["stop", "trainstack-c"]) == 1
    assert "run trainstack-c is not running" in capsys.readouterr().err
    assert main(["stop", "trainstack-unknown"]) == 1
    assert "no run named trainstack-unknown" in capsys.readouterr().err


def test_logs_print_every_stream_of_the_current_job(aws, capsys):
    pipeline(SUCCEEDS)
    main(["start", "--run-name", "trainstack-d"])
    ended(capsys.readouterr().out.strip())
    training_job("trainstack-d-1")
    logs = boto3.client("logs", region_name=REGION)
    logs.create_log_group(logGroupName="/aws/sagemaker/TrainingJobs")
    now = int(time.time() * 1000)
    for host, lines in (
        ("algo-1-1700000000", ["step 1 loss 4.2", "step 2 loss 3.9"]),
        ("algo-2-1700000000", ["ready"]),
    ):
        stream = f"trainstack-d-1/{host}"
        logs.create_log_stream(logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=stream)
        logs.put_log_events(
            logGroupName="/aws/sagemaker/TrainingJobs",
            logStreamName=stream,
            logEvents=[{"timestamp": now + index, "message": line} for index, line in enumerate(lines)],
        )
    assert main(["logs", "trainstack-d"]) == 0
    out = capsys.readouterr().out
    assert "algo-1-1700000000  step 1 loss 4.2" in out and "algo-2-1700000000  ready" in out
    assert main(["logs", "trainstack-d", "--follow", "--poll-seconds", "0.01"]) == 0
    assert capsys.readouterr().out == out


def test_status_takes_a_run_name(aws, capsys):
    pipeline(SUCCEEDS)
    main(["start", "--run-name", "trainstack-e"])
    ended(capsys.readouterr().out.strip())
    assert main(["status", "trainstack-e"]) == 0
    out = capsys.readouterr().out
    assert ":execution:trainstack-pipeline:trainstack-e: SUCCEEDED" in out
    assert '"attempts": 2' in out


def test_stop_and_logs_take_an_execution_arn_of_another_region(aws, capsys):
    """An execution ARN names its region: the commands look there, not in the config's region."""
    client = boto3.client("stepfunctions", region_name="eu-west-1")
    arn = client.create_state_machine(
        name="trainstack-pipeline", definition=json.dumps(KEEPS_RUNNING), roleArn=ROLE
    )["stateMachineArn"]
    execution_arn = client.start_execution(stateMachineArn=arn, name="trainstack-f")["executionArn"]
    assert main(["logs", execution_arn]) == 1
    assert capsys.readouterr().err.strip() == f"trainstack logs: run {execution_arn} has no training job yet."
    assert main(["stop", execution_arn]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"stopped execution {execution_arn}",
        "no training job had started",
    ]
