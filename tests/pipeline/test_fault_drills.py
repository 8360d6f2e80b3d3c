"""Fault drills: the synthesized pipeline, in the local interpreter (virtual clock, AWS's error names),
against jobs that fail the ways a fleet fails (docs/faults.md) and the ways a user's run fails.

FailureReasons are written as SageMaker reports them: `AlgorithmError: ` and the failure file train.py
writes (`trainstack-fault:<class>:<kind> <PythonError>: <sentence>`, docs/training.md), or the
toolkit's `ExecuteUserScriptError:\\nExitCode N\\nErrorMessage "..."` where no token was written.
"""

from __future__ import annotations

from localaws.sagemaker import CAPACITY_FAILURE, COMPLETED, STARTING, TRAINING, failed
from stacks.pipeline.state_machine_facts import polls_until
from tests.pipeline.test_scenarios import assigned

SUCCESS = [STARTING, TRAINING, COMPLETED]
HANG = failed(
    "AlgorithmError: trainstack-fault:infrastructure:hang TimeoutError: Rank 1 completed no optimizer "
    "step in 302 s (bound 300 s) after step 1200 and was not in a collective: it is the rank that stopped."
)
NCCL = failed(
    'AlgorithmError: ExecuteUserScriptError:\nExitCode 1\nErrorMessage "torch.distributed.DistBackendError: '
    "NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, remote process exited or "
    'there was a network error, NCCL version 2.23.4"\nCommand "torchrun --nnodes 2 train.py"'
)
USER_CONFIG = failed(
    "AlgorithmError: trainstack-fault:user:config ValueError: --micro-batch-size must be a positive "
    "whole number (got 0)."
)
INTERNAL = failed("InternalServerError: We encountered an internal error. Please try again.")
ODD = failed("AlgorithmError: Framework Error: \nTraceback (most recent call last): ...")
CHECKPOINTS = "s3://trainstack-checkpoints-test/{run}/"


def one_checkpoint_prefix(sm, run: str) -> None:
    """Every attempt of the run wrote to, and so resumed from, the same checkpoint prefix."""
    assert {job["CheckpointConfig"]["S3Uri"] for job in sm.fake.created} == {CHECKPOINTS.format(run=run)}


def test_a_hang_the_watchdog_ended_is_retried_and_resumes_from_the_checkpoint(interpreter, pipeline):
    sm = interpreter(job_scripts=[[STARTING, TRAINING, TRAINING, HANG], SUCCESS])
    outcome = sm.run({"runName": "trainstack-hang"})
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert list(sm.fake.jobs) == ["trainstack-hang-1", "trainstack-hang-2"]
    one_checkpoint_prefix(sm, "trainstack-hang")
    (retry,) = outcome.output["retriedFaults"]
    assert (retry["attempt"], retry["job"], retry["class"], retry["kind"]) == (
        1,
        "trainstack-hang-1",
        "infrastructure",
        "hang",
    )
    assert "Rank 1 completed no optimizer step" in retry["reason"]
    # The fault back-off, not the capacity one: the first of fault_retries' schedule plus its jitter.
    first = pipeline.settings.profile("llama-7b-smp").fault_retries.backoffs(1)[0]
    (wait,) = assigned(outcome, "ClassifyAttempt", "backoffSeconds")
    assert first <= wait <= first * 1.1


def test_an_nccl_error_is_retried_twice_then_the_run_succeeds(interpreter, pipeline):
    sm = interpreter(job_scripts=[[STARTING, TRAINING, NCCL], [STARTING, NCCL], SUCCESS])
    outcome = sm.run({"runName": "trainstack-nccl"})
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert (outcome.output["attempts"], outcome.output["trainingJobName"]) == (3, "trainstack-nccl-3")
    assert [(r["attempt"], r["class"], r["kind"]) for r in outcome.output["retriedFaults"]] == [
        (1, "infrastructure", "nccl"),
        (2, "infrastructure", "nccl"),
    ]
    one_checkpoint_prefix(sm, "trainstack-nccl")
    schedule = pipeline.settings.profile("llama-7b-smp").fault_retries.backoffs(2)
    waits = assigned(outcome, "ClassifyAttempt", "backoffSeconds")
    assert len(waits) == 2
    for wait, base in zip(waits, schedule, strict=True):
        assert base <= wait <= base * 1.1


def test_a_user_error_fails_at_once_with_its_reason(interpreter):
    sm = interpreter(job_scripts=[[STARTING, TRAINING, USER_CONFIG]])
    outcome = sm.run({"runName": "trainstack-usererr"})
    assert (outcome.status, outcome.error) == ("FAILED", "TrainingFailed")
    assert list(sm.fake.jobs) == ["trainstack-usererr-1"]
    assert outcome.cause == (
        f"Training job trainstack-usererr-1 failed: {USER_CONFIG.failure_reason} "
        "Classified: user error (config)."
    )


def test_the_infrastructure_budget_runs_out_after_max_retries(interpreter, pipeline):
    retries = pipeline.settings.profile("llama-7b-smp").fault_retries.max_retries
    sm = interpreter(job_scripts=[[STARTING, INTERNAL]])
    outcome = sm.run({"runName": "trainstack-flaky"})
    assert (outcome.status, outcome.error) == ("FAILED", "InfrastructureRetriesExhausted")
    assert len(sm.fake.jobs) == retries + 1
    last = f"trainstack-flaky-{retries + 1}"
    assert outcome.cause.startswith(
        f"Training job {last} failed with an infrastructure fault (sagemaker-internal) and no retry is left: "
        f"profile llama-7b-smp allows {retries} infrastructure retries (fault_retries.max_retries). "
        f"Training job {last} failed: InternalServerError"
    )
    assert outcome.cause.endswith(
        "Retried before: "
        + ", ".join(f"attempt {n} infrastructure (sagemaker-internal)" for n in range(1, retries + 1))
        + "."
    )


def test_no_fault_retry_starts_after_the_deadline_share_of_the_time_limit(interpreter, pipeline):
    """nccl-test: 1 h runtime + 4 h retry deadline + 6 h start-up allowance = 11 h; half of it is 5.5 h.
    A job that hangs after 6 h is not retried: a new attempt could not finish within the time limit."""
    polls = polls_until(6 * 3600)
    sm = interpreter(job_scripts=[[STARTING] * polls + [HANG]])
    outcome = sm.run({"profile": "nccl-test", "runName": "trainstack-late"})
    assert (outcome.status, outcome.error) == ("FAILED", "InfrastructureRetriesExhausted")
    assert len(sm.fake.jobs) == 1
    assert "the next attempt could not start within 50% of the run's time limit" in outcome.cause
    assert "(fault_retries.max_deadline_share of profile nccl-test)" in outcome.cause


def test_a_capacity_loss_and_an_infrastructure_fault_in_one_run_each_use_their_own_budget(
    interpreter, pipeline
):
    """nccl-test allows 3 capacity attempts: two capacity failures and a fault retry fit in one run."""
    sm = interpreter(
        job_scripts=[[CAPACITY_FAILURE], [STARTING, TRAINING, NCCL], [CAPACITY_FAILURE], SUCCESS]
    )
    outcome = sm.run({"profile": "nccl-test", "runName": "trainstack-mixed"})
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert outcome.output["attempts"] == 4
    assert [(r["attempt"], r["kind"]) for r in outcome.output["retriedFaults"]] == [(2, "nccl")]
    one_checkpoint_prefix(sm, "trainstack-mixed")
    profile = pipeline.settings.profile("nccl-test")
    capacity, fault = profile.retry.backoffs(2), profile.fault_retries.backoffs(1)
    waits = assigned(outcome, "ClassifyAttempt", "backoffSeconds")
    # Capacity back-off 1, fault back-off 1, capacity back-off 2 (the fault did not advance it).
    for wait, base in zip(waits, [capacity[0], fault[0], capacity[1]], strict=True):
        assert base <= wait <= base * 1.1


def test_an_unknown_failure_is_retried_once_then_fails_with_its_classification(interpreter):
    sm = interpreter(job_scripts=[[STARTING, ODD]])
    outcome = sm.run({"runName": "trainstack-odd"})
    assert (outcome.status, outcome.error) == ("FAILED", "TrainingFailed")
    assert list(sm.fake.jobs) == ["trainstack-odd-1", "trainstack-odd-2"]
    assert outcome.cause.endswith(
        "Classified: unknown fault (unknown). Retried before: attempt 1 unknown (unknown)."
    )
