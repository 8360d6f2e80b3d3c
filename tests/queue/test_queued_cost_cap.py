"""The cost cap (max_cost_usd) in queue mode, on the virtual clock: the queued attempt terminates the service
job of a run billed past the cap (which stops the training job Batch started), the run ends with
BudgetExceeded naming its checkpoint prefix and no job is left running; a run under the cap is not
touched. The default config caps llama-1b-smddp at $300; runs here take 42 instances (a queue of 42) so
that the cap is crossed within minutes of billing, as in tests/pipeline/test_cost_cap.py."""

from __future__ import annotations

import pytest

from localaws.emulator.batch_jobs import TERMINATIONS
from localaws.sagemaker import BILLED_TRAINING, COMPLETED, STARTING
from tests.pipeline import harness
from tests.pipeline.test_cost_cap import HOURLY, WIDE, _dollars
from tests.queue.conftest import service_job
from tests.queue.test_queue_pipeline import queue_for, queued_pipeline

WIDE_QUEUE = {"enabled": True, "max_instances": 42, "capacity_wait_hours": 1}


@pytest.fixture(scope="module")
def wide_pipeline(tmp_path_factory):
    return queued_pipeline(WIDE_QUEUE, tmp_path_factory)


@pytest.fixture(params=TERMINATIONS)
def wide_queue(wide_pipeline, monkeypatch, request):
    """Under each plausible moment a terminated service job shows FAILED (docs/emulator.md)."""
    context, queue = queue_for(wide_pipeline, monkeypatch, [[STARTING, BILLED_TRAINING]])
    queue.batch.terminations = request.param
    # The fake's TrainingStartTime/EndTime on the interpreter's clock.
    queue.sagemaker.now = queue.batch.now
    yield queue
    context.__exit__(None, None, None)


def test_a_queued_run_billed_past_the_cap_is_stopped_with_budget_exceeded(wide_queue):
    outcome = harness.wait_for(wide_queue.start("spend", {**WIDE, "runName": "trainstack-qspend"}))
    assert (outcome.status, outcome.error) == ("FAILED", "BudgetExceeded"), outcome.cause
    name = service_job("trainstack-qspend-1")
    terminations = [call for call in wide_queue.batch.calls if call[0] == "TerminateServiceJob"]
    assert [request["jobId"] for _, request in terminations] == [
        job_id for job_id, job in wide_queue.batch.jobs.items() if job.name == name
    ]
    [training_job] = wide_queue.batch.training_jobs_of(name)
    job = wide_queue.sagemaker.jobs[training_job]
    assert job.current().status == "Stopped"  # no job left running
    assert [job.status for job in wide_queue.batch.jobs.values()] == ["FAILED"]
    billed, cap = _dollars(outcome.cause)[:2]
    assert (cap, billed) == (300.0, round(round(job.billed_until - job.billed_from) * HOURLY / 3600, 2))
    # Stopped at the first poll past the cap, billed until the next poll found it Stopped (60 s apart).
    assert 300 < billed <= 300 + HOURLY * 2 * 60 / 3600
    assert f"Training job {training_job} was stopped by the pipeline" in outcome.cause
    assert "s3://trainstack-checkpoints-test/trainstack-qspend/" in outcome.cause


def test_a_queued_run_under_the_cap_is_not_touched(wide_queue):
    wide_queue.sagemaker.behaviour.script([[STARTING, BILLED_TRAINING, COMPLETED]])
    outcome = harness.wait_for(wide_queue.start("cheap", {**WIDE, "runName": "trainstack-qcheap"}))
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert not [call for call in wide_queue.batch.calls if call[0] == "TerminateServiceJob"]
