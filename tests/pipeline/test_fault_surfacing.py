"""Where a run's faults show: `trainstack status` (each fault retry with its class, kind and reason, and the
budget) and the run report (a classification per attempt), on runs of the synthesized pipeline."""

from __future__ import annotations

import boto3

from localaws.sagemaker import COMPLETED, STARTING, TRAINING
from tests.pipeline import harness
from tests.pipeline.test_fault_drills import HANG, NCCL, USER_CONFIG
from trainstack.cli import main as trainstack
from trainstack.report.collect import collect
from trainstack.report.render import attempt_table
from trainstack.runs import latest_execution


def status_of(sm, run: str, capsys) -> str:
    common = ["--state-machine-arn", sm.pipeline_arn, "--region", harness.REGION]
    trainstack(["status", run, *common])
    return capsys.readouterr().out


def test_status_lists_each_fault_retry_with_its_reason_and_the_budget_used(interpreter, capsys):
    sm = interpreter(job_scripts=[[STARTING, HANG], [STARTING, TRAINING, NCCL], [STARTING, COMPLETED]])
    assert sm.run({"runName": "trainstack-shown"}, name="trainstack-shown").status == "SUCCEEDED"
    out = status_of(sm, "trainstack-shown", capsys)
    assert (
        "fault retries: 2 of 3 infrastructure retries used (profile llama-7b-smp; none after 50% of the "
        "run's time limit; an unknown failure is retried once)"
    ) in out
    assert (
        "  attempt 1 (trainstack-shown-1): infrastructure fault (hang), retried from the checkpoint: "
        "Training job trainstack-shown-1 failed: AlgorithmError: trainstack-fault:infrastructure:hang "
        "TimeoutError: Rank 1"
    ) in out
    assert "  attempt 2 (trainstack-shown-2): infrastructure fault (nccl), retried from the checkpoint" in out


def test_status_of_a_failed_run_reads_the_retries_from_its_history(interpreter, capsys):
    sm = interpreter(job_scripts=[[STARTING, NCCL], [STARTING, USER_CONFIG]])
    outcome = sm.run({"runName": "trainstack-broken"}, name="trainstack-broken")
    assert (outcome.status, outcome.error) == ("FAILED", "TrainingFailed")
    out = status_of(sm, "trainstack-broken", capsys)
    assert "fault retries: 1 of 3 infrastructure retries used" in out
    assert "  attempt 1 (trainstack-broken-1): infrastructure fault (nccl), retried from the checkpoint" in (
        out
    )
    assert "Classified: user error (config). Retried before: attempt 1 infrastructure (nccl)." in out


def test_the_report_classifies_each_failed_attempt(interpreter):
    sm = interpreter(job_scripts=[[STARTING, HANG], [STARTING, COMPLETED]])
    assert sm.run({"runName": "trainstack-classified"}, name="trainstack-classified").status == "SUCCEEDED"
    stepfunctions = boto3.client("stepfunctions", region_name=harness.REGION)
    report = collect(
        stepfunctions,
        boto3.client("sagemaker", region_name=harness.REGION),
        boto3.client("logs", region_name=harness.REGION),
        latest_execution(stepfunctions, sm.pipeline_arn, "trainstack-classified"),
        "trainstack",
    )
    first, second = report.attempts
    assert (first.classification, second.classification) == ("infrastructure fault (hang)", None)
    table = attempt_table(report.attempts)
    assert "<th>Classification</th>" in table
    assert "<td>infrastructure fault (hang), retried from the checkpoint</td>" in table
