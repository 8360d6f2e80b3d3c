"""The cost cap (max_cost_usd) in queue mode, on the virtual clock: the queued attempt terminates the service
job of a run billed past the cap (which stops the training job Batch started), the run ends with
BudgetExceeded naming its checkpoint prefix and no job is left running; a run under the cap is not
touched. The default config caps llama-1b-smddp at $300; runs here take 63 instances (a queue of 63) so
that the cap is crossed within minutes of billing, as in tests/pipeline/test_cost_cap.py."""

from __future__ import annotations

import pytest

from localaws.emulator.batch_jobs import TERMINATIONS
from localaws.sagemaker import BILLED_TRAINING, CAPACITY_FAILURE, COMPLETED, STARTING
from tests.pipeline import harness
from tests.pipeline.test_cost_cap import HOURLY, WIDE, _dollars
from tests.pipeline.test_scenarios import assigned
from tests.queue.conftest import service_job
from tests.queue.test_queue_pipeline import queue_for, queued_pipeline

WIDE_QUEUE = {"enabled": True, "max_instances": 63, "capacity_wait_hours": 1}


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


# Batch's first training job bills ~7 minutes (~$190), then fails for capacity: Batch starts a second
# one (docs/queue.md). Each poll describes the service job and the training job: two phases a minute.
LOST_AFTER_BILLING = [STARTING] + [BILLED_TRAINING] * 14 + [CAPACITY_FAILURE]


def _billed_usd(queue, names: list[str]) -> float:
    """What the training jobs billed (BillableTimeInSeconds x instances x the hourly price)."""
    jobs = [queue.sagemaker.jobs[name] for name in names]
    return sum(round(job.billed_until - job.billed_from) for job in jobs) * HOURLY / 3600


def test_every_training_job_batch_started_counts_toward_the_cap(wide_queue):
    """The second training job alone (~$190 were it to complete) stays under the $300 cap; with the
    first one's ~$190 the run passes it, and the attempt stops the second job."""
    wide_queue.sagemaker.behaviour.script([LOST_AFTER_BILLING, LOST_AFTER_BILLING[:-1] + [COMPLETED]])
    outcome = harness.wait_for(wide_queue.start("lost", {**WIDE, "runName": "trainstack-qlost"}))
    assert (outcome.status, outcome.error) == ("FAILED", "BudgetExceeded"), outcome.cause
    lost, stopped = wide_queue.batch.training_jobs_of(service_job("trainstack-qlost-1"))
    assert wide_queue.sagemaker.jobs[lost].current().status == "Failed"
    assert wide_queue.sagemaker.jobs[stopped].current().status == "Stopped"  # no job left running
    first, second = _billed_usd(wide_queue, [lost]), _billed_usd(wide_queue, [stopped])
    assert first < 300 and second < 300 < first + second
    billed, cap, earlier = _dollars(outcome.cause)[:3]
    assert cap == 300.0 and earlier == pytest.approx(first, abs=0.01)
    assert billed == pytest.approx(first + second, abs=0.01)
    # Stopped at the first poll past the cap, billed until the next poll found it Stopped (60 s apart).
    assert 300 < billed <= 300 + HOURLY * 2 * 60 / 3600
    assert f"Training job {stopped} was stopped by the pipeline" in outcome.cause
    assert [call[0] for call in wide_queue.batch.calls].count("TerminateServiceJob") == 1


def test_a_run_under_the_cap_counts_every_training_job_batch_started(wide_queue):
    """~$190 and ~$50: under the cap, the run succeeds, its spend the sum of both training jobs."""
    wide_queue.sagemaker.behaviour.script(
        [LOST_AFTER_BILLING, [STARTING] + [BILLED_TRAINING] * 4 + [COMPLETED]]
    )
    outcome = harness.wait_for(wide_queue.start("relost", {**WIDE, "runName": "trainstack-qrelost"}))
    assert outcome.status == "SUCCEEDED", outcome.cause
    names = wide_queue.batch.training_jobs_of(service_job("trainstack-qrelost-1"))
    assert outcome.output["trainingJobName"] == names[-1] and len(names) == 2
    # The pipeline's spend after the attempt: both training jobs.
    assert assigned(outcome, "RunAttempt", "spentUsd") == [pytest.approx(_billed_usd(wide_queue, names))]
    assert not [call for call in wide_queue.batch.calls if call[0] == "TerminateServiceJob"]
