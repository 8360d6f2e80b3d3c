"""What the pipeline publishes for its dashboard and alarms, from real executions in the emulator, and the
dashboard and alarms as synthesized (default config; queue mode in tests/queue/test_queue_template.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto.cloudwatch.responses import CloudWatchResponse

from localaws.sagemaker import CAPACITY_FAILURE, COMPLETED, STARTING, TRAINING, failed
from stacks.pipeline.attempt.training_attempt import ATTEMPT_STATUSES
from stacks.pipeline.attempt_metrics import (
    ATTEMPTS,
    CAPACITY_WAIT_SECONDS,
    FAILED_ATTEMPTS,
    FAULT_DIMENSION,
    OUTCOME_DIMENSION,
)
from stacks.pipeline.monitoring import (
    CAPACITY_WAIT_ALARM_HOURS,
    INFRASTRUCTURE_FAULTS_ALARM_COUNT,
    INSTANCE_METRICS,
    RUN_FAILED_PATTERN,
    TRAINING_GRAPHS,
)
from tests.infra.templates import resources
from tests.pipeline import harness
from tests.pipeline.metric_filter import matches, published
from training_scripts.metrics import METRIC_DEFINITIONS

NAMESPACE = "trainstack/trainstack"
SUCCESS = [STARTING, TRAINING, COMPLETED]


def statistics(metric_name: str, dimensions: dict[str, str] | None = None) -> dict[str, Any]:
    """Sum, Maximum, Minimum and SampleCount of everything published to the metric."""
    now = datetime.now(UTC)
    points = boto3.client("cloudwatch", region_name=harness.REGION).get_metric_statistics(
        Namespace=NAMESPACE,
        MetricName=metric_name,
        Dimensions=[{"Name": name, "Value": value} for name, value in (dimensions or {}).items()],
        StartTime=now - timedelta(hours=1),
        EndTime=now + timedelta(hours=1),
        Period=7200,
        Statistics=["Sum", "Maximum", "Minimum", "SampleCount"],
    )["Datapoints"]
    assert len(points) <= 1
    return points[0] if points else {"SampleCount": 0}


def seconds_since_start(outcome: harness.Outcome, state: str) -> list[float]:
    """When each visit to a state began, in seconds after the execution started (virtual clock)."""
    start = outcome.history[0]["timestamp"]
    return [
        (event["timestamp"] - start).total_seconds()
        for event in outcome.history
        if event["type"] == "TaskStateEntered" and event["stateEnteredEventDetails"]["name"] == state
    ]


def test_attempts_by_outcome_and_capacity_waits_reach_cloudwatch(interpreter):
    sm = interpreter(job_scripts=[[STARTING, CAPACITY_FAILURE], [CAPACITY_FAILURE], SUCCESS])
    outcome = sm.run({"runName": "trainstack-waits"})
    assert outcome.status == "SUCCEEDED", outcome.cause

    assert statistics(ATTEMPTS, {OUTCOME_DIMENSION: "Capacity"})["Sum"] == 2
    assert statistics(ATTEMPTS, {OUTCOME_DIMENSION: "Completed"})["Sum"] == 1
    # One wait per attempt without capacity: how long the run had been without capacity then.
    waits = statistics(CAPACITY_WAIT_SECONDS)
    first, second, _ = seconds_since_start(outcome, "PublishAttemptMetrics")
    assert waits["SampleCount"] == 2
    assert waits["Minimum"] == pytest.approx(first, abs=1)
    assert waits["Maximum"] == pytest.approx(second, abs=1)
    assert second > first > 60  # the first job polled, then failed; a backoff came between


def test_failed_attempts_reach_cloudwatch_by_fault_class(interpreter):
    nccl = failed('AlgorithmError: ExecuteUserScriptError:\nExitCode 1\nErrorMessage "ncclSystemError"')
    oom = failed("AlgorithmError: trainstack-fault:user:oom MemoryError: CUDA out of memory.")
    sm = interpreter(job_scripts=[[STARTING, nccl], [STARTING, nccl], [STARTING, oom]])
    outcome = sm.run({"runName": "trainstack-faults"})
    assert (outcome.status, outcome.error) == ("FAILED", "TrainingFailed")
    assert statistics(FAILED_ATTEMPTS, {FAULT_DIMENSION: "infrastructure"})["Sum"] == 2
    assert statistics(FAILED_ATTEMPTS, {FAULT_DIMENSION: "user"})["Sum"] == 1
    assert statistics(ATTEMPTS, {OUTCOME_DIMENSION: "Failed"})["Sum"] == 3


def test_metrics_cloudwatch_refuses_never_fail_a_run(interpreter, monkeypatch):
    def refuse(self):
        raise harness.service_error("InternalServiceError", "CloudWatch is having a bad day")

    monkeypatch.setattr(CloudWatchResponse, "put_metric_data", refuse)
    sm = interpreter(job_scripts=[[CAPACITY_FAILURE], SUCCESS])
    outcome = sm.run({"runName": "trainstack-unmeasured"})
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert outcome.output["attempts"] == 2
    assert len(outcome.events("TaskFailed")) == 2  # both publications failed, and were caught
    assert statistics(ATTEMPTS, {OUTCOME_DIMENSION: "Capacity"})["SampleCount"] == 0


def test_runs_failed_filter_counts_failed_runs_but_not_invalid_input(interpreter):
    sm = interpreter(job_scripts=[[STARTING, TRAINING, failed("OutOfMemoryError: CUDA out of memory")]])
    runs = [sm.run({"runName": "trainstack-oom"}, name="oom")]
    runs.append(sm.run({"runName": "not-this-project"}, name="bad-input"))
    sm.fake.behaviour.script([SUCCESS])
    runs.append(sm.run({"runName": "trainstack-fine"}, name="fine"))
    assert [(run.status, run.error) for run in runs] == [
        ("FAILED", "TrainingFailed"),
        ("FAILED", "InvalidInput"),
        ("SUCCEEDED", None),
    ]

    messages = [message for run in runs for message in run.log_messages()]
    failures = [json.loads(m) for m in messages if json.loads(m)["type"] == "ExecutionFailed"]
    assert sorted(event["details"]["error"] for event in failures) == ["InvalidInput", "TrainingFailed"]
    assert published(RUN_FAILED_PATTERN, messages) == 1


def test_the_filter_evaluator_refuses_syntax_it_does_not_implement():
    event = json.dumps({"type": "TaskSucceeded", "details": {"resource": "stopTrainingJob"}})
    assert matches('{ $.type = "TaskSucceeded" && $.details.resource != "createTrainingJob" }', event)
    assert not matches('{ $.type = "TaskSucceeded" && $.details.missing != "x" }', event)
    for unsupported in ('{ $.type = "Task*" }', '{ $.type = "A" || $.type = "B" }', '"TaskSucceeded"'):
        with pytest.raises(ValueError):
            matches(unsupported, event)


# ------------------------------------------------------------------ the template


def alarms(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Alarm properties by the alarm's construct id (RunFailed, CleanupFailed, ...)."""
    found = {}
    for logical_id, body in resources(template, "AWS::CloudWatch::Alarm").items():
        name = logical_id.removeprefix("Monitoring")
        found[name[:-8]] = body["Properties"]  # CDK appends an 8-character hash
    return found


def metric_stats(alarm: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The alarm's metrics by id (a math alarm), or {"": metric} for a single-metric alarm."""
    if "Metrics" not in alarm:
        return {
            "": {
                "MetricName": alarm["MetricName"],
                "Namespace": alarm["Namespace"],
                "Dimensions": alarm.get("Dimensions"),
                "Stat": alarm["Statistic"],
            }
        }
    return {
        m["Id"]: {**m["MetricStat"]["Metric"], "Stat": m["MetricStat"]["Stat"]}
        for m in alarm["Metrics"]
        if "MetricStat" in m
    }


def machine_ids(template: dict[str, Any]) -> dict[str, str]:
    return {
        body["Properties"]["StateMachineName"]: logical_id
        for logical_id, body in resources(template, "AWS::StepFunctions::StateMachine").items()
    }


def assert_alarms(template: dict[str, Any], cleanup_machines: list[str], sweepers: list[str]) -> None:
    """Every alarm notifies the topic; each watches what it says, at its threshold."""
    found = alarms(template)
    assert sorted(found) == [
        "CapacityWaitLong",
        "CleanupFailed",
        "ExecutionThrottled",
        "InfrastructureFaults",
        "OrphanStopped",
        "RunFailed",
    ]
    topic = {"Ref": next(iter(resources(template, "AWS::SNS::Topic")))}
    for alarm in found.values():
        assert alarm["AlarmActions"] == [topic]
        assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
        assert alarm["TreatMissingData"] == "notBreaching"
    ids = machine_ids(template)
    pipeline = {"Name": "StateMachineArn", "Value": {"Ref": ids["trainstack-pipeline"]}}

    run_failed = metric_stats(found["RunFailed"])
    assert (run_failed["failed"]["Namespace"], run_failed["failed"]["MetricName"]) == (
        NAMESPACE,
        "RunsFailed",
    )
    assert (run_failed["timedOut"]["MetricName"], run_failed["timedOut"]["Dimensions"]) == (
        "ExecutionsTimedOut",
        [pipeline],
    )
    assert found["RunFailed"]["Threshold"] == 1

    watched = {
        (m["MetricName"], m["Dimensions"][0]["Value"]["Ref"])
        for m in metric_stats(found["CleanupFailed"]).values()
    }
    assert watched == {
        (metric, ids[name])
        for name in cleanup_machines
        for metric in ("ExecutionsFailed", "ExecutionsTimedOut")
    }

    (orphans,) = metric_stats(found["OrphanStopped"]).values()
    assert (orphans["Namespace"], orphans["MetricName"], orphans["Stat"]) == (
        NAMESPACE,
        "OrphansStopped",
        "Sum",
    )
    filters = {
        json.dumps(body["Properties"]["LogGroupName"]): body["Properties"]
        for body in resources(template, "AWS::Logs::MetricFilter").values()
    }
    for sweeper in sweepers:
        transformation = filters[json.dumps(f"/aws/vendedlogs/states/{sweeper}")]["MetricTransformations"][0]
        assert (transformation["MetricNamespace"], transformation["MetricName"]) == (
            NAMESPACE,
            "OrphansStopped",
        )

    (waited,) = metric_stats(found["CapacityWaitLong"]).values()
    assert (waited["MetricName"], waited["Stat"]) == (CAPACITY_WAIT_SECONDS, "Maximum")
    assert found["CapacityWaitLong"]["Threshold"] == CAPACITY_WAIT_ALARM_HOURS * 3600

    (faults,) = metric_stats(found["InfrastructureFaults"]).values()
    assert (faults["MetricName"], faults["Dimensions"], faults["Stat"]) == (
        FAILED_ATTEMPTS,
        [{"Name": FAULT_DIMENSION, "Value": "infrastructure"}],
        "Sum",
    )
    assert found["InfrastructureFaults"]["Threshold"] == INFRASTRUCTURE_FAULTS_ALARM_COUNT
    assert found["InfrastructureFaults"]["Period"] == 3600

    (throttled,) = metric_stats(found["ExecutionThrottled"]).values()
    assert (throttled["MetricName"], throttled["Dimensions"]) == ("ExecutionThrottled", [pipeline])


def test_alarms_notify_the_topic(pipeline):
    assert_alarms(
        pipeline.template,
        cleanup_machines=["trainstack-job-cleanup", "trainstack-job-sweeper"],
        sweepers=["trainstack-job-sweeper"],
    )
    (runs_failed,) = [
        body["Properties"]
        for body in resources(pipeline.template, "AWS::Logs::MetricFilter").values()
        if body["Properties"]["MetricTransformations"][0]["MetricName"] == "RunsFailed"
    ]
    assert runs_failed["FilterPattern"] == RUN_FAILED_PATTERN


def dashboard_widgets(template: dict[str, Any]) -> dict[str, list[list[Any]]]:
    """Each graph's metrics by title, from the dashboard body (references shown as "<ref>")."""
    (dashboard,) = resources(template, "AWS::CloudWatch::Dashboard").values()
    parts = dashboard["Properties"]["DashboardBody"]["Fn::Join"][1]
    body = json.loads("".join(part if isinstance(part, str) else "<ref>" for part in parts))
    return {
        widget["properties"]["title"]: widget["properties"].get("metrics", [])
        for widget in body["widgets"]
        if widget["type"] == "metric"
    }


def searched(metrics: list[list[Any]]) -> list[str]:
    return [metric[0]["expression"] for metric in metrics if "expression" in metric[0]]


def test_dashboard_shows_executions_attempts_training_and_instance_metrics(pipeline):
    widgets = dashboard_widgets(pipeline.template)
    executions = widgets["Pipeline executions (per hour)"]
    assert {metric[1] for metric in executions if metric[0] == "AWS/States"} == {
        "ExecutionsStarted",
        "ExecutionsSucceeded",
        "ExecutionsFailed",
        "ExecutionsTimedOut",
        "ExecutionsAborted",
    }
    assert [NAMESPACE, "RunsFailed"] in [metric[:2] for metric in executions]
    attempts = widgets["Attempts by outcome (per hour)"]
    assert {(metric[1], metric[3]) for metric in attempts} == {
        (ATTEMPTS, status) for status in ATTEMPT_STATUSES
    }
    assert CAPACITY_WAIT_SECONDS in json.dumps(widgets["Waiting for capacity (hours, longest run)"])
    assert {(metric[1], metric[3]) for metric in widgets["Failed attempts by fault (per hour)"]} == {
        (FAILED_ATTEMPTS, fault) for fault in ("infrastructure", "user", "unknown")
    }
    assert searched(widgets["Quota waits by quota (per hour)"]) == [
        f"SEARCH('{{{NAMESPACE},Quota}} MetricName=\"QuotaWaits\"', 'Sum', 3600)"
    ]
    defined = {definition["Name"] for definition in METRIC_DEFINITIONS}
    for title, names in TRAINING_GRAPHS.items():
        assert set(names) <= defined
        assert searched(widgets[title]) == [
            "SEARCH('{/aws/sagemaker/TrainingJobs,TrainingJobName} TrainingJobName=trainstack "
            f"MetricName=\"{name}\"', 'Average', 60)"
            for name in names
        ]
    for name in INSTANCE_METRICS:
        assert searched(widgets[f"{name} of training instances (%)"]) == [
            "SEARCH('{/aws/sagemaker/TrainingJobs,Host} Host=trainstack "
            f"MetricName=\"{name}\"', 'Average', 60)"
        ]
