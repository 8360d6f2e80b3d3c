"""The synthesized state machine, run in moto's interpreter against scripted SageMaker outcomes."""

from __future__ import annotations

import json

import boto3
import pytest

from tests.domain.input_cases import MALFORMED_INPUTS
from tests.pipeline import harness
from tests.pipeline.harness import CAPACITY_FAILURE, COMPLETED, STARTING, TRAINING, Phase, failed
from trainstack.execution_input import InvalidInputError, validate_execution_input
from trainstack.job_request import build_create_training_job_request

DEFAULT_PROFILE = "llama-7b-smp"
SUCCESS = [STARTING, TRAINING, COMPLETED]


def execution_arn(name: str) -> str:
    return f"arn:aws:states:{harness.REGION}:{harness.ACCOUNT}:execution:trainstack-pipeline:{name}"


def test_success_first_try(interpreter, pipeline):
    sm = interpreter(job_scripts=[SUCCESS])
    outcome = sm.run({"runName": "trainstack-first"})
    assert outcome.status == "SUCCEEDED", outcome.cause
    job = "trainstack-first-1"
    assert outcome.output == {
        "trainingJobName": job,
        "instanceType": "ml.p5.48xlarge",
        "instanceCount": 2,
        "modelArtifacts": f"s3://trainstack-artifacts-test/trainstack-first/{job}/output/model.tar.gz",
        "checkpointUri": "s3://trainstack-checkpoints-test/trainstack-first/",
        "attempts": 1,
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
    assert outcome.output["attempts"] == 3
    assert outcome.output["trainingJobName"] == "trainstack-retry-3"
    # Backoff before attempts 2 and 3: the profile's schedule plus at most 10% jitter.
    schedule = pipeline.settings.profile(DEFAULT_PROFILE).retry.backoff_schedule()
    backoffs = [state["progress"]["waitSeconds"] for state in outcome.state_inputs("WaitBeforeRetry")]
    assert len(backoffs) == 2
    for wait, base in zip(backoffs, schedule, strict=False):
        assert base <= wait <= base * 1.1


def test_capacity_never_returns_ends_capacity_exhausted_after_the_profile_attempts(interpreter, pipeline):
    profile = pipeline.settings.profile("nccl-test")
    sm = interpreter(job_scripts=[[CAPACITY_FAILURE]])
    outcome = sm.run({"profile": "nccl-test", "runName": "trainstack-nocap"})
    assert outcome.status == "FAILED"
    assert outcome.error == "CapacityExhausted"
    assert len(sm.fake.jobs) == profile.retry.max_attempts
    assert f"No capacity after {profile.retry.max_attempts} attempts" in outcome.cause
    assert "CapacityError" in outcome.cause
    assert sum(sm.clock.waits) <= profile.retry.deadline_hours * 3600


def test_other_failure_is_training_failed_with_one_job(interpreter):
    reason = "AlgorithmError: ExecuteUserScriptError: exit code 1"
    sm = interpreter(job_scripts=[[STARTING, TRAINING, failed(reason)]])
    outcome = sm.run({"runName": "trainstack-broken"})
    assert (outcome.status, outcome.error) == ("FAILED", "TrainingFailed")
    assert outcome.cause == f"Training job trainstack-broken-1 failed: {reason}"
    assert len(sm.fake.jobs) == 1


@pytest.mark.filterwarnings("ignore:Exception\\(FakeSageMakerError\\) with code ThrottlingException")
def test_throttled_create_is_retried_with_backoff(interpreter):
    sm = interpreter(
        job_scripts=[SUCCESS],
        create_errors=[("ThrottlingException", "Rate exceeded"), ("ThrottlingException", "Rate exceeded")],
    )
    outcome = sm.run({"runName": "trainstack-throttled"})
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert sm.fake.create_calls == 3
    assert len(sm.fake.jobs) == 1
    assert len(sm.clock.retry_sleeps) == 2
    errors = [
        event["taskFailedEventDetails"]["error"]
        for event in outcome.events("TaskFailed")
        if event["taskFailedEventDetails"]["resource"] == "createTrainingJob"
    ]
    assert errors == ["SageMaker.ThrottlingException"] * 2


def test_resource_limit_is_quota_exceeded_without_retry(interpreter):
    message = "The account-level service limit 'ml.p5.48xlarge for training job usage' is 0 Instances"
    sm = interpreter(create_errors=[("ResourceLimitExceeded", message)])
    outcome = sm.run({"runName": "trainstack-quota"})
    assert (outcome.status, outcome.error) == ("FAILED", "QuotaExceeded")
    assert message in outcome.cause
    assert sm.fake.create_calls == 1
    assert not sm.fake.jobs


def test_stopped_job_is_training_stopped(interpreter):
    sm = interpreter(job_scripts=[[STARTING, TRAINING, Phase("Stopped", "Stopped")]])
    outcome = sm.run({"runName": "trainstack-stopped"})
    assert (outcome.status, outcome.error) == ("FAILED", "TrainingStopped")
    assert "trainstack-stopped-1 was stopped" in outcome.cause


@pytest.mark.parametrize(
    ("case", "execution_input", "expected"), MALFORMED_INPUTS, ids=[c[0] for c in MALFORMED_INPUTS]
)
def test_malformed_input_is_invalid_input_before_any_job(
    interpreter, pipeline, case, execution_input, expected
):
    sm = interpreter()
    outcome = sm.run(execution_input, name="bad")
    assert (outcome.status, outcome.error) == ("FAILED", "InvalidInput")
    assert not sm.fake.jobs
    with pytest.raises(InvalidInputError) as rejected:
        validate_execution_input(execution_input, pipeline.settings, "bad")
    assert str(rejected.value).startswith(expected)
    # Same cause where JSONPath can say it; otherwise the same field is named.
    if case == "unknown-field":
        assert outcome.cause.startswith("The input has unknown field(s)")
    elif case == "hyperparameter-number":
        # JSONPath cannot check every map value's type: SageMaker's validation rejects the request.
        assert outcome.cause.startswith("hyperparameters was rejected by SageMaker")
    else:
        assert outcome.cause.startswith(expected)
        assert sm.fake.create_calls == 0


def test_aborted_execution_has_its_job_stopped_by_the_cleanup_machine(interpreter):
    sm = interpreter(job_scripts=[[STARTING, TRAINING]])
    sm.clock.scale = 0.01  # poll waits really wait (60 s -> 0.6 s), so the execution is mid-poll
    arn = harness.start(sm.pipeline_arn, {"runName": "trainstack-aborted"}, "to-abort")
    harness.wait_until(lambda: sm.fake.jobs)
    client = boto3.client("stepfunctions", region_name=harness.REGION)
    client.stop_execution(executionArn=arn, error="Cancelled", cause="operator")
    assert harness.wait_for(arn).status == "ABORTED"
    assert sm.fake.jobs["trainstack-aborted-1"].current().status == "InProgress"

    event = status_change_event(arn, "ABORTED")
    cleanup = harness.run(sm.cleanup_arn, event, "cleanup-1")
    assert cleanup.status == "SUCCEEDED", cleanup.cause
    assert sm.fake.stop_requests == ["trainstack-aborted-1"]
    assert cleanup.output == {"stopped": ["trainstack-aborted-1"]}


def test_cleanup_leaves_other_executions_and_finished_jobs_alone(interpreter):
    sm = interpreter(job_scripts=[SUCCESS])
    done = sm.run({"runName": "trainstack-done"}, name="done")
    assert done.status == "SUCCEEDED"
    cleanup = harness.run(sm.cleanup_arn, status_change_event(done.execution_arn, "FAILED"), "cleanup-2")
    assert cleanup.status == "SUCCEEDED", cleanup.cause
    other = harness.run(
        sm.cleanup_arn, status_change_event(execution_arn("someone-else"), "ABORTED"), "cleanup-3"
    )
    assert other.status == "SUCCEEDED"
    assert sm.fake.stop_requests == []


def status_change_event(arn: str, status: str) -> dict:
    """The EventBridge event the cleanup rule forwards (fields the definition reads, plus context)."""
    return {
        "version": "0",
        "source": "aws.states",
        "detail-type": "Step Functions Execution Status Change",
        "account": harness.ACCOUNT,
        "region": harness.REGION,
        "resources": [arn],
        "detail": {
            "executionArn": arn,
            "stateMachineArn": arn.replace(":execution:", ":stateMachine:").rsplit(":", 1)[0],
            "name": arn.rsplit(":", 1)[1],
            "status": status,
        },
    }


@pytest.mark.parametrize("profile_name", ["llama-7b-smp", "llama-1b-smddp", "nccl-test", "small-torchrun"])
def test_request_equals_the_builders_for_the_same_input(interpreter, pipeline, profile_name):
    """Same builder, two paths: what SageMaker received == build_create_training_job_request(...)."""
    execution_input = {
        "profile": profile_name,
        "runName": f"trainstack-{profile_name}",
        "hyperparameters": {"learning_rate": "3e-4", "model_preset": "tiny"},
        "instanceCount": 1,
        "maxRuntimeHours": 1.5,
        "resumeFrom": "s3://trainstack-checkpoints-test/trainstack-earlier/",
    }
    sm = interpreter(job_scripts=[SUCCESS])
    outcome = sm.run(execution_input, name="same-builder")
    assert outcome.status == "SUCCEEDED", outcome.cause
    run = validate_execution_input(execution_input, pipeline.settings, "same-builder")
    expected = build_create_training_job_request(
        pipeline.settings.profile(profile_name), pipeline.resources, run, 1, execution_arn("same-builder")
    )
    assert_same_request(sm.fake.created, [expected])
    assert outcome.output["instanceCount"] == 1
    assert (
        outcome.output["instanceType"]
        == pipeline.settings.profile(profile_name).instance_preferences[0].instance_type
    )


def test_default_input_request_equals_the_builders(interpreter, pipeline):
    sm = interpreter(job_scripts=[SUCCESS])
    outcome = sm.run({}, name="defaults")
    assert outcome.status == "SUCCEEDED", outcome.cause
    run = validate_execution_input({}, pipeline.settings, "defaults")
    assert run.run_name == "trainstack-defaults"
    expected = build_create_training_job_request(
        pipeline.settings.profiles[0], pipeline.resources, run, 1, execution_arn("defaults")
    )
    assert_same_request(sm.fake.created, [expected])


def assert_same_request(received: list[dict], expected: list[dict]) -> None:
    assert len(received) == len(expected)
    for got, want in zip(received, expected, strict=True):
        assert sorted(got) == sorted(want)
        for key in want:
            assert got[key] == want[key], key


def test_created_requests_are_valid_for_botocores_service_model(interpreter, pipeline):
    from botocore.validate import ParamValidator

    sm = interpreter(job_scripts=[[CAPACITY_FAILURE], SUCCESS])
    assert sm.run({"runName": "trainstack-model", "maxRuntimeHours": 2}).status == "SUCCEEDED"
    shape = harness._SAGEMAKER_MODEL.operation_model("CreateTrainingJob").input_shape
    for request in sm.fake.created:
        report = ParamValidator().validate(request, shape)
        assert not report.has_errors(), report.generate_report()
        assert request["StoppingCondition"]["MaxRuntimeInSeconds"] == 7200


@pytest.mark.parametrize(
    ("hours", "seconds"), [(1.5, 5400), (0.25, 900), (0.01, 36), (2, 7200), (672, 2_419_200)]
)
def test_max_runtime_hours_become_seconds_without_multiplication(interpreter, hours, seconds):
    sm = interpreter(job_scripts=[SUCCESS])
    assert sm.run({"runName": "trainstack-runtime", "maxRuntimeHours": hours}).status == "SUCCEEDED"
    assert sm.fake.created[0]["StoppingCondition"]["MaxRuntimeInSeconds"] == seconds


def test_polls_often_while_starting_and_rarely_while_training(interpreter, pipeline):
    sm = interpreter(job_scripts=[[STARTING, STARTING, TRAINING, TRAINING, TRAINING, COMPLETED]])
    assert sm.run({"runName": "trainstack-polls", "profile": "nccl-test"}).status == "SUCCEEDED"
    definition = pipeline.raw_training_definition
    tier_seconds = definition["States"]["ChoosePollInterval"]["Choices"][0]["Next"]
    training_wait = int(tier_seconds.removeprefix("PollEvery").removesuffix("s"))
    assert sm.clock.waits == [60, 60, 60, training_wait, training_wait, training_wait]
    assert training_wait > 60


def test_job_outliving_every_allowance_is_stopped_by_the_pipeline(interpreter):
    sm = interpreter(job_scripts=[[STARTING, TRAINING]])
    outcome = sm.run({"runName": "trainstack-forever", "profile": "nccl-test", "maxRuntimeHours": 0.01})
    assert (outcome.status, outcome.error) == ("FAILED", "TrainingStopped")
    assert sm.fake.stop_requests == ["trainstack-forever-1"]
    assert "its time limit" in outcome.cause


def test_run_name_already_used_is_invalid_input(interpreter):
    sm = interpreter(job_scripts=[SUCCESS])
    assert sm.run({"runName": "trainstack-twice"}, name="first").status == "SUCCEEDED"
    outcome = sm.run({"runName": "trainstack-twice"}, name="second")
    assert (outcome.status, outcome.error) == ("FAILED", "InvalidInput")
    assert outcome.cause.startswith("runName trainstack-twice is already used")
    assert len(sm.fake.jobs) == 1


def test_errors_are_named_as_aws_names_them(interpreter, pipeline):
    """The definition catches only AWS's PascalCase names, never the emulator's lowercase ones."""
    names = {
        name
        for definition in (pipeline.training_definition, pipeline.cleanup_definition)
        for state in all_states(json.loads(definition))
        for rule in state.get("Catch", []) + state.get("Retry", [])
        for name in rule["ErrorEquals"]
    }
    assert names == {
        "States.ALL",  # the advisory job-name probe
        "SageMaker.ThrottlingException",
        "SageMaker.ResourceLimitExceededException",
        "SageMaker.ValidationException",
        "SageMaker.ResourceInUseException",
    }


def all_states(definition: dict) -> list[dict]:
    states = []
    for state in definition["States"].values():
        states.append(state)
        if "ItemProcessor" in state:
            states.extend(all_states(state["ItemProcessor"]))
    return states


def test_capacity_retries_stop_at_the_retry_deadline(interpreter, pipeline):
    """nccl-test: 4 h deadline. A job that waits ~4 h for capacity and then fails leaves no time to retry."""
    deadline = pipeline.settings.profile("nccl-test").retry.deadline_hours * 3600
    sm = interpreter(job_scripts=[[STARTING] * 130 + [CAPACITY_FAILURE]])
    outcome = sm.run({"profile": "nccl-test", "runName": "trainstack-deadline"})
    assert (outcome.status, outcome.error) == ("FAILED", "CapacityExhausted")
    assert outcome.cause.startswith(f"No capacity within the retry deadline of {int(deadline)} seconds")
    assert len(sm.fake.jobs) == 1
    assert sum(sm.clock.waits) > deadline - 900  # it did wait for capacity, about as long as allowed


@pytest.mark.parametrize(
    "missing_job_error",
    [
        ("ValidationException", "Requested resource not found."),
        ("ResourceNotFound", "Training job not found"),
    ],
)
def test_job_name_probe_passes_whatever_sagemaker_calls_a_missing_job(interpreter, missing_job_error):
    sm = interpreter(job_scripts=[SUCCESS], missing_job_error=missing_job_error)
    outcome = sm.run({"runName": "trainstack-" + "a" * 49})  # the longest run name that fits
    assert outcome.status == "SUCCEEDED", outcome.cause
