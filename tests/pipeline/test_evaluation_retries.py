"""The evaluation job rides out what training rides out, on the virtual clock: the synthesized pipeline and
registration machines in the emulator against scripted evaluation jobs (stacks/pipeline/registry/
evaluation_states.py, docs/registry.md "Evaluation failures and retries"). PROFILE keeps the default
`retry` (60 s doubling to 300 s, plus up to 10 % jitter; 48 h) and `fault_retries` (3 retries, 60 s doubling
to 600 s).

How SageMaker refuses a CreateTrainingJob for capacity is not documented (botocore's model declares only
ResourceInUse, ResourceLimitExceeded and ResourceNotFound for it): assumed to arrive as an undeclared code,
so as `SageMaker.SageMakerException`, with SageMaker's capacity wording in the message; tested under each
plausible code and wording.
"""

from __future__ import annotations

import pytest

from localaws.emulator import VirtualClock
from localaws.emulator.jsonata_engine import jsonata_evaluator
from localaws.sagemaker import (
    CAPACITY_ERROR,
    CAPACITY_FAILURE,
    SPOT_WAIT_EXCEEDED,
    TRAINING,
    evaluated,
    failed,
)
from localaws.sagemaker.validation import JOB_NAME_PATTERN
from stacks.pipeline.attempt.training_attempt import CREATE_QUICK_RETRIES
from stacks.pipeline.registry.evaluation_request import EVALUATION_JOB_NAME
from tests.pipeline import harness
from tests.pipeline.test_fault_drills import NCCL
from tests.pipeline.test_quota_drills import busy, exceeded
from tests.pipeline.test_registry import (
    REGISTRATION_OPERATIONS,
    assert_requests_match_the_service_model,
    versions,
)
from trainstack.registry import EVALUATION_JOBS_LIMIT, evaluation_job_name, is_evaluation_job
from trainstack.retry_policies import MAX_ATTEMPTS_LIMIT
from trainstack.run_names import RUN_NAME_MAX_LENGTH

INSTANCE_TYPE = "ml.g5.12xlarge"  # PROFILE's only preference, on spot (config/default.yaml)
MODEL = "s3://trainstack-artifacts-test/{run}/{run}-1/output/model/"
RETRY_WAIT = "WaitBeforeEvaluationRetry"
# What registering a first version calls (no Approved version to describe).
FIRST_VERSION = REGISTRATION_OPERATIONS - {"DescribeModelPackage"}
# evaluate.py's own error for a model channel it cannot load (training_scripts/evaluate.py), as SageMaker
# reports the failure file it writes.
MODEL_DOES_NOT_LOAD = (
    "AlgorithmError: trainstack-fault:user:config ValueError: The model channel /opt/ml/input/data/model "
    "holds neither config.json nor model.tar.gz."
)


def evaluation_jobs(run) -> list[str]:
    return [name for name in run.sm.fake.jobs if is_evaluation_job(name)]


def backoffs(run) -> list[float]:
    """Seconds of each wait before a new evaluation job (history timestamps read the virtual clock)."""
    (execution,) = harness.executions(run.sm.registration_arn)
    times = {"WaitStateEntered": [], "WaitStateExited": []}
    for event in execution.history:
        details = event.get("stateEnteredEventDetails") or event.get("stateExitedEventDetails") or {}
        if event["type"] in times and details["name"] == RETRY_WAIT:
            times[event["type"]].append(event["timestamp"])
    return [
        (exited - entered).total_seconds()
        for entered, exited in zip(times["WaitStateEntered"], times["WaitStateExited"], strict=True)
    ]


def within(seconds: float, base: float) -> bool:
    """The back-off `base` plus its jitter (at most 10 %)."""
    return base <= seconds <= base * 1.1


@pytest.mark.parametrize(
    "no_capacity", [CAPACITY_FAILURE, SPOT_WAIT_EXCEEDED], ids=["capacity-error", "spot"]
)
def test_an_evaluation_job_without_capacity_is_retried_as_a_new_job_after_the_back_off(registry, no_capacity):
    run = registry()
    outcome = run("trainstack-c1", 2.0, [TRAINING, no_capacity], evaluated(2.0))
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert outcome.output["modelPackage"]["status"] == "Registered"
    assert evaluation_jobs(run) == ["trainstack-c1-eval", "trainstack-c1-eval2"]
    [waited] = backoffs(run)
    assert within(waited, 60)  # retry.initial_backoff_seconds
    # The version names the job that evaluated it.
    lineage = versions()[0]["CustomerMetadataProperties"]
    assert lineage["evaluation.jobName"] == "trainstack-c1-eval2"
    assert versions()[0]["ModelMetrics"]["ModelQuality"]["Statistics"]["S3Uri"] == (
        "s3://trainstack-artifacts-test/trainstack-c1/trainstack-c1-eval2/output/model/evaluation.json"
    )
    assert_requests_match_the_service_model(run.sm.registration_arn, FIRST_VERSION)


@pytest.mark.filterwarnings("ignore:Exception\\(ServiceError\\) with code")
@pytest.mark.parametrize(
    "refusal",
    [
        ("InsufficientCapacityError", CAPACITY_ERROR),
        ("CapacityError", "Unable to provision requested ML compute capacity. Please retry later."),
        busy(INSTANCE_TYPE, "spot training"),
    ],
    ids=["insufficient-capacity", "capacity-error", "busy-quota"],
)
def test_a_create_refused_for_capacity_or_a_busy_quota_is_tried_again_after_the_back_off(registry, refusal):
    # A capacity refusal outlasts the attempt machine's quick retries of an undeclared error; a quota refusal
    # (a declared error) is reported at once.
    refusals = 1 if refusal[0] == "ResourceLimitExceeded" else 1 + CREATE_QUICK_RETRIES
    run = registry(evaluation_create_errors=[refusal] * refusals)
    outcome = run("trainstack-r1", 2.0)
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert outcome.output["modelPackage"]["status"] == "Registered"
    # The refused create made no job; the next one is a new name.
    assert evaluation_jobs(run) == ["trainstack-r1-eval2"]
    [waited] = backoffs(run)
    assert within(waited, 60)
    assert_requests_match_the_service_model(run.sm.registration_arn, FIRST_VERSION)


def test_an_infrastructure_fault_is_retried_then_the_evaluation_completes(registry):
    run = registry()
    outcome = run("trainstack-i1", 2.0, [TRAINING, NCCL], evaluated(2.0))
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert evaluation_jobs(run) == ["trainstack-i1-eval", "trainstack-i1-eval2"]
    [waited] = backoffs(run)
    assert within(waited, 60)  # fault_retries.initial_backoff_seconds


def test_infrastructure_faults_past_max_retries_end_evaluation_failed_naming_the_count(registry):
    run = registry()
    outcome = run("trainstack-i2", 0, [TRAINING, NCCL])
    assert (outcome.status, outcome.error) == ("FAILED", "EvaluationFailed")
    assert evaluation_jobs(run) == [evaluation_job_name("trainstack-i2", n) for n in (1, 2, 3, 4)]
    waited = backoffs(run)
    assert [within(seconds, base) for seconds, base in zip(waited, (60, 120, 240), strict=True)] == [True] * 3
    retried = ", ".join(f"attempt {n} infrastructure (nccl)" for n in (1, 2, 3))
    assert outcome.cause == (
        "Evaluation job trainstack-i2-eval4: Training job trainstack-i2-eval4 failed: "
        f"{NCCL.failure_reason}. Classified: infrastructure "
        "fault (nccl), profile small-torchrun allows 3 infrastructure retries (fault_retries.max_retries). "
        f"Retried before: {retried}. Evaluation jobs tried: 4. The model stays at "
        f"{MODEL.format(run='trainstack-i2')}; it is not registered."
    )
    assert versions() == []


def test_a_user_error_ends_evaluation_failed_at_once_with_one_job(registry):
    run = registry()
    outcome = run("trainstack-u1", 0, [TRAINING, failed(MODEL_DOES_NOT_LOAD)], evaluated(2.0))
    assert (outcome.status, outcome.error) == ("FAILED", "EvaluationFailed")
    assert evaluation_jobs(run) == ["trainstack-u1-eval"]
    assert backoffs(run) == []
    assert outcome.cause == (
        "Evaluation job trainstack-u1-eval: Training job trainstack-u1-eval failed: "
        f"{MODEL_DOES_NOT_LOAD} Classified: user error "
        "(config), which is not retried. Evaluation jobs tried: 1. The model stays at "
        f"{MODEL.format(run='trainstack-u1')}; it is not registered."
    )
    assert versions() == []


def test_a_quota_below_the_request_ends_evaluation_failed_at_once(registry):
    run = registry(evaluation_create_errors=[exceeded(INSTANCE_TYPE)])
    outcome = run("trainstack-q1", 2.0)
    assert (outcome.status, outcome.error) == ("FAILED", "EvaluationFailed")
    assert evaluation_jobs(run) == [] and backoffs(run) == []
    assert outcome.cause.startswith(
        "Evaluation job trainstack-q1-eval: SageMaker refused job trainstack-q1-eval: the 2 instances "
        "requested exceed quota "
        f"'{INSTANCE_TYPE} for training job usage' of 1 instances; request a higher quota"
    )
    assert outcome.cause.endswith(
        " Not retried. Evaluation jobs tried: 1. The model stays at "
        f"{MODEL.format(run='trainstack-q1')}; it is not registered."
    )


def test_no_capacity_until_the_retry_deadline_ends_evaluation_failed(registry):
    # A 900 s retry deadline: jobs fail at about 120 s, 300 s, 540 s and 900 s of the evaluation; after the
    # fourth the longest back-off (330 s) would start the next one past the deadline.
    run = registry({r"\"deadlineSeconds\":172800": r"\"deadlineSeconds\":900"})
    outcome = run("trainstack-d1", 0, [TRAINING, CAPACITY_FAILURE])
    assert (outcome.status, outcome.error) == ("FAILED", "EvaluationFailed")
    assert evaluation_jobs(run) == [evaluation_job_name("trainstack-d1", n) for n in (1, 2, 3, 4)]
    assert outcome.cause == (
        f"Evaluation job trainstack-d1-eval4: {CAPACITY_ERROR} No capacity within the retry "
        "deadline of 900 seconds from the evaluation's start (retry.deadline_hours of profile "
        "small-torchrun). Evaluation jobs tried: 4. The model stays at "
        f"{MODEL.format(run='trainstack-d1')}; it is not registered."
    )
    assert versions() == []


def evaluation_job_names(run_name: str, numbers) -> list[str]:
    """The names the registration machine gives the run's evaluation jobs (its JSONata, evaluated)."""
    evaluate = jsonata_evaluator(VirtualClock())
    return [
        evaluate(f'($run := {{"runName": "{run_name}"}}; $attempt := {number}; {EVALUATION_JOB_NAME})')
        for number in numbers
    ]


# A short name, one whose later evaluation jobs no longer fit beside it (56 characters), the longest.
@pytest.mark.parametrize(
    "run_name",
    ["trainstack-n1", "trainstack-" + "x" * 45, "trainstack-" + "x" * (RUN_NAME_MAX_LENGTH - 11)],
)
def test_evaluation_job_names_are_sagemakers_valid_unique_names_as_trainstack_registry_writes_them(run_name):
    numbers = (1, 2, 9, 10, 99, 100, EVALUATION_JOBS_LIMIT)
    names = evaluation_job_names(run_name, numbers)
    assert names == [evaluation_job_name(run_name, number) for number in numbers]
    assert len(set(names)) == len(names)
    training_jobs = [f"{run_name}-{attempt}" for attempt in (1, 2, MAX_ATTEMPTS_LIMIT)]
    for name in names:
        assert len(name) <= 63 and JOB_NAME_PATTERN.fullmatch(name), name
        assert is_evaluation_job(name) and name not in training_jobs
    assert not any(is_evaluation_job(name) for name in training_jobs)


def test_two_longest_run_names_that_differ_in_their_last_character_name_different_evaluation_jobs():
    """Run names of 59 characters: cut to fit the suffix, they would name one job, and the second run's
    evaluation would fail with ResourceInUse."""
    first = "trainstack-search-" + "x" * (RUN_NAME_MAX_LENGTH - 19) + "a"
    second = first[:-1] + "b"
    assert len(first) == RUN_NAME_MAX_LENGTH
    numbers = (1, 2, EVALUATION_JOBS_LIMIT)
    names = {run: evaluation_job_names(run, numbers) for run in (first, second)}
    assert set(names[first]).isdisjoint(names[second]), names
    for run, found in names.items():
        assert found == [evaluation_job_name(run, number) for number in numbers]
        assert all(name.startswith("trainstack-search-") and len(name) <= 63 for name in found)
