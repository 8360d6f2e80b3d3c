"""The synthesized state machines, run in the local interpreter (localaws.emulator: JSONata, AWS's error
names, virtual clock) against scripted SageMaker outcomes."""

from __future__ import annotations

import json

import boto3
import pytest

from localaws.sagemaker import (
    CAPACITY_FAILURE,
    COMPLETED,
    SPOT_WAIT_EXCEEDED,
    STARTING,
    TRAINING,
    Phase,
    evaluated,
    failed,
)
from stacks.pipeline.state_machine_facts import POLL_MIN_SECONDS, poll_seconds
from tests.domain.input_cases import MALFORMED_INPUTS
from tests.pipeline import harness
from trainstack.execution_input import InvalidInputError, validate_execution_input
from trainstack.job_request import build_create_training_job_request

# moto warns that SageMaker's model declares no ThrottlingException: that is the point (AWS names it
# SageMaker.SageMakerException).
UNMODELLED_THROTTLING = pytest.mark.filterwarnings(
    "ignore:Exception\\(ServiceError\\) with code ThrottlingException"
)
DEFAULT_PROFILE = "llama-7b-smp"
SUCCESS = [STARTING, TRAINING, COMPLETED]
SAGEMAKER_ERROR = "SageMaker.SageMakerException"


def execution_arn(name: str) -> str:
    return f"arn:aws:states:{harness.REGION}:{harness.ACCOUNT}:execution:trainstack-pipeline:{name}"


def task_errors(outcomes: list[harness.Outcome], resource: str) -> list[str]:
    return [
        event["taskFailedEventDetails"]["error"]
        for outcome in outcomes
        for event in outcome.events("TaskFailed")
        if event["taskFailedEventDetails"].get("resource") == resource
    ]


def assigned(outcome: harness.Outcome, state: str, variable: str) -> list:
    """The values a state assigned to a variable, visit by visit."""
    return [
        json.loads(event["stateExitedEventDetails"]["assignedVariables"][variable])
        for event in outcome.history
        if event["type"].endswith("StateExited")
        and event["stateExitedEventDetails"]["name"] == state
        and variable in event["stateExitedEventDetails"].get("assignedVariables", {})
    ]


def test_success_first_try(interpreter):
    sm = interpreter(job_scripts=[SUCCESS])
    outcome = sm.run({"runName": "trainstack-first"})
    assert outcome.status == "SUCCEEDED", outcome.cause
    job = "trainstack-first-1"
    assert outcome.output == {
        "trainingJobName": job,
        "instanceType": "ml.p5.48xlarge",
        "instanceCount": 2,
        "modelArtifacts": f"s3://trainstack-artifacts-test/trainstack-first/{job}/output/model/",
        "checkpointUri": "s3://trainstack-checkpoints-test/trainstack-first/",
        "attempts": 1,
        "retriedFaults": [],
        "quotaWaits": [],
        "modelPackage": None,  # the default profile has no registry: block
        "codeDigest": None,  # the image's own train.py, not a team's code (docs/own-code.md)
    }
    assert list(sm.fake.jobs) == [job]


def test_capacity_errors_twice_then_success_resumes_from_one_checkpoint(interpreter, pipeline):
    sm = interpreter(job_scripts=[[STARTING, CAPACITY_FAILURE], [CAPACITY_FAILURE], SUCCESS])
    outcome = sm.run({"runName": "trainstack-retry"})
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert list(sm.fake.jobs) == [f"trainstack-retry-{attempt}" for attempt in (1, 2, 3)]
    assert {job["CheckpointConfig"]["S3Uri"] for job in sm.fake.created} == {
        "s3://trainstack-checkpoints-test/trainstack-retry/"
    }
    assert (outcome.output["attempts"], outcome.output["trainingJobName"]) == (3, "trainstack-retry-3")
    # Backoff before attempts 2 and 3: the profile's schedule plus at most 10% jitter, never over 330 s.
    schedule = pipeline.settings.profile(DEFAULT_PROFILE).retry.backoff_schedule()
    backoffs = assigned(outcome, "ClassifyAttempt", "backoffSeconds")
    assert len(backoffs) == 2
    for wait, base in zip(backoffs, schedule, strict=False):
        assert base <= wait <= base * 1.1 <= 330


def test_capacity_never_returns_ends_capacity_exhausted_after_the_profile_attempts(interpreter, pipeline):
    profile = pipeline.settings.profile("nccl-test")
    sm = interpreter(job_scripts=[[CAPACITY_FAILURE]])
    outcome = sm.run({"profile": "nccl-test", "runName": "trainstack-nocap"})
    assert (outcome.status, outcome.error) == ("FAILED", "CapacityExhausted")
    assert len(sm.fake.jobs) == profile.retry.max_attempts
    assert outcome.cause.startswith(
        f"No capacity after {profile.retry.max_attempts} attempts (profile nccl-test allows 3); "
        "last job trainstack-nocap-3: CapacityError"
    )


def test_capacity_retries_stop_at_the_retry_deadline_on_the_wall_clock(interpreter, pipeline):
    """nccl-test: 4 h deadline. A job that waits ~5 h for capacity and then fails leaves no time to retry."""
    deadline = round(pipeline.settings.profile("nccl-test").retry.deadline_hours * 3600)
    sm = interpreter(job_scripts=[[STARTING] * 90 + [CAPACITY_FAILURE]])
    outcome = sm.run({"profile": "nccl-test", "runName": "trainstack-deadline"})
    assert (outcome.status, outcome.error) == ("FAILED", "CapacityExhausted")
    assert outcome.cause.startswith(f"No capacity within the retry deadline of {deadline} seconds")
    assert len(sm.fake.jobs) == 1
    assert sum(sm.clock.waits) > deadline  # the job did wait for capacity longer than allowed


def test_out_of_memory_fails_fast_as_training_failed_with_one_job(interpreter):
    reason = "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    sm = interpreter(job_scripts=[[STARTING, TRAINING, failed(reason)]])
    outcome = sm.run({"runName": "trainstack-oom"})
    assert (outcome.status, outcome.error) == ("FAILED", "TrainingFailed")
    assert outcome.cause == f"Training job trainstack-oom-1 failed: {reason} Classified: user error (oom)."
    assert len(sm.fake.jobs) == 1


@UNMODELLED_THROTTLING
def test_throttled_create_is_retried_with_backoff(interpreter):
    sm = interpreter(job_scripts=[SUCCESS], throttles={"CreateTrainingJob": 4})
    outcome = sm.run({"runName": "trainstack-throttled"})
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert (sm.fake.create_calls, len(sm.fake.jobs)) == (5, 1)
    # AWS names throttling SageMaker.SageMakerException; the machine reads "Rate exceeded" in the Cause.
    assert task_errors(sm.attempts(), "createTrainingJob") == [SAGEMAKER_ERROR] * 4


@UNMODELLED_THROTTLING
def test_throttled_status_calls_mid_run_neither_end_the_run_nor_stop_its_job(interpreter):
    sm = interpreter(
        job_scripts=[[STARTING, TRAINING, TRAINING, TRAINING, COMPLETED]],
        throttles={"DescribeTrainingJob": 9},  # more than one poll's retries: the next poll asks again
        throttle_describes_after=2,
    )
    outcome = sm.run({"runName": "trainstack-throttled-describe"})
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert sm.fake.control.throttled == {"DescribeTrainingJob": 9}
    assert sm.fake.stop_requests == []
    assert set(task_errors(sm.attempts(), "describeTrainingJob")) == {SAGEMAKER_ERROR}


def test_sagemaker_validation_is_invalid_input_with_its_message_within_seconds(interpreter):
    message = (
        "1 validation error detected: Value 'ml.p9.huge' at 'resourceConfig.instancePreferences.1.member."
        "instanceType' failed to satisfy constraint: Member must satisfy enum value set"
    )
    sm = interpreter(reject_creates=("ValidationException", message))
    outcome = sm.run({"runName": "trainstack-rejected"})
    assert (outcome.status, outcome.error) == ("FAILED", "InvalidInput")
    assert outcome.cause.startswith(f"The input was rejected by SageMaker: {message} (Service: SageMaker")
    assert not sm.fake.jobs
    assert sm.fake.create_calls == 3  # the first call and two quick retries
    assert sum(sm.clock.retry_sleeps) <= 5


def test_resource_limit_is_quota_exceeded_naming_the_quota_without_retry(interpreter):
    message = "The account-level service limit 'ml.p5.48xlarge for training job usage' is 0 Instances"
    sm = interpreter(create_errors=[("ResourceLimitExceeded", message)])
    outcome = sm.run({"runName": "trainstack-quota"})
    assert (outcome.status, outcome.error) == ("FAILED", "QuotaExceeded")
    assert outcome.cause.startswith("SageMaker refused job trainstack-quota-1: a service quota is exhausted")
    assert "'ml.p5.48xlarge for training job usage'" in outcome.cause
    assert (sm.fake.create_calls, len(sm.fake.jobs)) == (1, 0)


def test_job_stopped_by_a_user_is_training_stopped(interpreter):
    sm = interpreter(job_scripts=[[STARTING, TRAINING, Phase("Stopped", "Stopped")]])
    outcome = sm.run({"runName": "trainstack-stopped"})
    assert (outcome.status, outcome.error) == ("FAILED", "TrainingStopped")
    assert outcome.cause == "Training job trainstack-stopped-1 was stopped (Stopped)."


def test_spot_capacity_that_never_came_is_retried_like_a_capacity_error(interpreter):
    sm = interpreter(job_scripts=[[STARTING, SPOT_WAIT_EXCEEDED], SUCCESS], evaluation_script=evaluated(2.0))
    outcome = sm.run({"profile": "small-torchrun", "runName": "trainstack-spot"})
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert list(sm.fake.jobs) == ["trainstack-spot-1", "trainstack-spot-2", "trainstack-spot-eval"]
    assert (outcome.output["instanceType"], outcome.output["instanceCount"]) == ("ml.g5.12xlarge", 1)


@pytest.mark.parametrize(
    ("case", "execution_input", "expected"), MALFORMED_INPUTS, ids=[c[0] for c in MALFORMED_INPUTS]
)
def test_malformed_input_is_invalid_input_before_any_call(
    interpreter, pipeline, case, execution_input, expected
):
    sm = interpreter()
    outcome = sm.run(execution_input, name="bad")
    assert (outcome.status, outcome.error) == ("FAILED", "InvalidInput")
    assert sm.fake.create_calls == 0
    with pytest.raises(InvalidInputError) as rejected:
        validate_execution_input(execution_input, pipeline.settings, "bad")
    assert outcome.cause.startswith(expected)
    assert outcome.cause == str(rejected.value)


@pytest.mark.parametrize(
    ("hours", "seconds"),
    [(1.5, 5400), (0.25, 900), (0.01, 36), (0.0137, 49), (2.5001, 9000), (672, 2_419_200)],
)
def test_max_runtime_hours_of_any_precision_become_whole_seconds(interpreter, pipeline, hours, seconds):
    sm = interpreter(job_scripts=[SUCCESS])
    execution_input = {"runName": "trainstack-runtime", "maxRuntimeHours": hours}
    assert sm.run(execution_input, name="runtime").status == "SUCCEEDED"
    assert sm.fake.created[0]["StoppingCondition"]["MaxRuntimeInSeconds"] == seconds
    run = validate_execution_input(execution_input, pipeline.settings, "runtime")
    expected = build_create_training_job_request(
        pipeline.settings.profiles[0],
        pipeline.resources,
        run,
        1,
        execution_arn("runtime"),
        namespace=pipeline.settings.project,
    )
    assert_same_request(sm.fake.created, [expected])


def assert_same_request(received: list[dict], expected: list[dict]) -> None:
    assert len(received) == len(expected)
    for got, want in zip(received, expected, strict=True):
        assert sorted(got) == sorted(want)
        for key in want:
            assert got[key] == want[key], key


def test_longest_run_name_fits_the_longest_job_name(interpreter):
    run_name = "trainstack-" + "a" * 48  # 59 characters: "-999" keeps job names within 63
    sm = interpreter(job_scripts=[SUCCESS])
    assert sm.run({"runName": run_name}).status == "SUCCEEDED"


@pytest.mark.parametrize("profile_name", ["llama-7b-smp", "llama-1b-smddp", "nccl-test", "small-torchrun"])
def test_request_equals_the_builders_for_every_profile(interpreter, pipeline, profile_name):
    """One create task for every request shape: what SageMaker received == the Python builder's request."""
    execution_input = {
        "profile": profile_name,
        "runName": f"trainstack-{profile_name}",
        "hyperparameters": {"learning_rate": "3e-4", "model_preset": "tiny"},
        "instanceCount": 1,
        "maxRuntimeHours": 1.5,
        "resumeFrom": "s3://trainstack-checkpoints-test/trainstack-earlier/",
        "code": {"digest": "ab" * 32, "entry": "src/fit.py"},  # the team's own code
    }
    # small-torchrun's run is evaluated
    sm = interpreter(job_scripts=[SUCCESS], evaluation_script=evaluated(2.0))
    outcome = sm.run(execution_input, name="same-builder")
    assert outcome.status == "SUCCEEDED", outcome.cause
    run = validate_execution_input(execution_input, pipeline.settings, "same-builder")
    profile = pipeline.settings.profile(profile_name)
    expected = build_create_training_job_request(
        profile,
        pipeline.resources,
        run,
        1,
        execution_arn("same-builder"),
        namespace=pipeline.settings.project,
    )
    assert_same_request(sm.fake.created[:1], [expected])  # small-torchrun's evaluation job follows
    assert outcome.output["instanceCount"] == 1
    assert outcome.output["instanceType"] == profile.instance_preferences[0].instance_type


def test_default_input_request_equals_the_builders(interpreter, pipeline):
    sm = interpreter(job_scripts=[SUCCESS])
    outcome = sm.run({}, name="defaults")
    assert outcome.status == "SUCCEEDED", outcome.cause
    run = validate_execution_input({}, pipeline.settings, "defaults")
    assert run.run_name == "trainstack-defaults"
    expected = build_create_training_job_request(
        pipeline.settings.profiles[0],
        pipeline.resources,
        run,
        1,
        execution_arn("defaults"),
        namespace=pipeline.settings.project,
    )
    assert_same_request(sm.fake.created, [expected])


def test_polls_follow_the_jobs_age(interpreter):
    """Every POLL_MIN_SECONDS while a job is young, then a fraction of its age (stacks: poll_seconds)."""
    sm = interpreter(job_scripts=[[STARTING] * 3 + [TRAINING] * 60 + [COMPLETED]])
    assert sm.run({"runName": "trainstack-polls", "profile": "nccl-test"}).status == "SUCCEEDED"
    age = 0.0
    for wait in sm.clock.waits:
        assert abs(wait - poll_seconds(age)) <= 1  # the clock also moves by the interpreter's own time
        age += wait
    assert sm.clock.waits[:3] == [POLL_MIN_SECONDS] * 3
    assert sm.clock.waits[-1] > POLL_MIN_SECONDS


def test_job_outliving_every_allowance_is_stopped_by_the_pipeline(interpreter, pipeline):
    sm = interpreter(job_scripts=[[STARTING, TRAINING]])
    outcome = sm.run({"runName": "trainstack-forever", "profile": "nccl-test", "maxRuntimeHours": 0.01})
    assert (outcome.status, outcome.error) == ("FAILED", "TrainingStopped")
    assert sm.fake.stop_requests == ["trainstack-forever-1"]
    limit = 36 + 4 * 3600 + 6 * 3600  # MaxRuntimeInSeconds + retry deadline + start-up allowance
    assert outcome.cause == (
        f"Training job trainstack-forever-1 was stopped by the pipeline after {limit} seconds, its time "
        "limit (maxRuntimeHours + retry deadline + start-up allowance)."
    )
    # The clock also moves by the interpreter's own (real) time, so the waits may add up to a bit less.
    assert limit - 600 <= sum(sm.clock.waits) <= limit + 1800


def test_run_name_already_used_is_invalid_input(interpreter):
    sm = interpreter(job_scripts=[SUCCESS])
    assert sm.run({"runName": "trainstack-twice"}, name="first").status == "SUCCEEDED"
    outcome = sm.run({"runName": "trainstack-twice"}, name="second")
    assert (outcome.status, outcome.error) == ("FAILED", "InvalidInput")
    assert outcome.cause == (
        "runName trainstack-twice is already used by training job trainstack-twice-1; choose another runName."
    )
    assert len(sm.fake.jobs) == 1


def test_errors_are_named_as_aws_names_them(pipeline):
    """The machines catch only names AWS gives aws-sdk:sagemaker errors and the refused start of a child
    execution (the developer guide's name and the one LocalStack recorded against AWS), never an
    emulator's; and States.ALL where any error must let the run go on (a failed publication of the
    attempt's metrics)."""
    names = {
        name
        for definition in (pipeline.training_definition, pipeline.attempt_definition)
        for state in json.loads(definition)["States"].values()
        for rule in state.get("Catch", []) + state.get("Retry", [])
        for name in rule["ErrorEquals"]
    }
    assert names == {
        "SageMaker.SageMakerException",
        "SageMaker.ResourceLimitExceededException",
        "SageMaker.ResourceInUseException",
        "StepFunctions.ExecutionLimitExceeded",
        "StepFunctions.ExecutionLimitExceededException",
        "States.ALL",
    }


def test_aborted_execution_has_its_job_stopped_by_the_cleanup_machine(interpreter):
    sm = interpreter(job_scripts=[[STARTING, TRAINING]])
    sm.fake.control.hold("DescribeTrainingJob")  # the attempt's first status call waits: the run is mid-poll
    arn = harness.start(sm.pipeline_arn, {"runName": "trainstack-aborted"}, "to-abort")
    harness.wait_until(lambda: sm.fake.control.waiting["DescribeTrainingJob"])
    client = boto3.client("stepfunctions", region_name=harness.REGION)
    client.stop_execution(executionArn=arn, error="Cancelled", cause="operator")
    assert harness.wait_for(arn).status == "ABORTED"
    assert sm.fake.jobs["trainstack-aborted-1"].current().status == "InProgress"

    sm.fake.control.release_gate("DescribeTrainingJob")  # the cleanup describes the job too
    cleanup = harness.run(sm.cleanup_arn, harness.status_change_event(arn, "ABORTED"), "cleanup-1")
    assert cleanup.status == "SUCCEEDED", cleanup.cause
    assert sm.fake.stop_requests == ["trainstack-aborted-1"]
    assert cleanup.output == {"stopped": ["trainstack-aborted-1"]}


def test_cleanup_leaves_other_executions_and_finished_jobs_alone(interpreter):
    sm = interpreter(job_scripts=[SUCCESS])
    done = sm.run({"runName": "trainstack-done"}, name="done")
    assert done.status == "SUCCEEDED"
    cleanup = harness.run(
        sm.cleanup_arn, harness.status_change_event(done.execution_arn, "FAILED"), "cleanup-2"
    )
    assert cleanup.status == "SUCCEEDED", cleanup.cause
    other = harness.run(
        sm.cleanup_arn, harness.status_change_event(execution_arn("someone-else"), "ABORTED"), "cleanup-3"
    )
    assert other.status == "SUCCEEDED", other.cause
    assert sm.fake.stop_requests == []
