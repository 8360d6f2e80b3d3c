"""The inner machines started directly with a request of one's own (docs/pipeline.md, "RequestRefused"): the
synthesized attempt machine (direct mode, and queue mode against FakeBatch) and the registration machine
refuse a request the profiles do not allow, naming the field, before any CreateTrainingJob or
SubmitServiceJob. The pipeline's own attempts pass: tests/pipeline and tests/queue run them."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from localaws.sagemaker import COMPLETED, STARTING, TRAINING
from tests.pipeline import harness
from tests.pipeline.conftest import FAKE_VALUES, state_machine_arn
from tests.queue import test_queue_pipeline as queue_scenario
from trainstack.job_request import RunRequest, build_create_training_job_request

RUN = "trainstack-rogue"
FOREIGN_IMAGE = "999999999999.dkr.ecr.us-east-1.amazonaws.com/miner:latest"
ANOTHER_ROLE = f"arn:aws:iam::{harness.ACCOUNT}:role/platform-admin"


def own_request(pipeline, profile_name: str = "llama-7b-smp", settings=None) -> dict[str, Any]:
    """The request the pipeline itself would send for attempt 1 of RUN (`settings`: the pipeline's)."""
    profiles = (settings or pipeline.settings).profiles
    profile = next(p for p in profiles if p.name == profile_name)
    run = RunRequest(profile=profile.name, run_name=RUN)
    return build_create_training_job_request(profile, pipeline.resources, run, 1, "arn:execution")


def _edited(request: dict[str, Any], edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    changed = copy.deepcopy(request)
    edit(changed)
    return changed


def _many_p5(count: int) -> Callable[[dict[str, Any]], None]:
    def edit(request: dict[str, Any]) -> None:
        request["ResourceConfig"]["InstancePreferences"] = [
            {"InstanceType": "ml.p5.48xlarge", "InstanceCount": count}
        ]

    return edit


def _code(key: str) -> dict[str, str]:
    """The toolkit's code hyperparameters naming `key` of the artifact bucket, JSON-encoded as the pipeline
    sends them."""
    return {
        "sagemaker_submit_directory": f'"s3://{FAKE_VALUES["ArtifactBucket"]}/{key}"',
        "sagemaker_program": '"fit.py"',
    }


# name -> (the edit, the cause's start). Counts: 600 is above MAX_INSTANCE_COUNT (512), which the default
# profiles allow a run to ask for in direct mode; in queue mode 64 is above queue.max_instances.
ROGUE = {
    "no VpcConfig": (lambda r: r.pop("VpcConfig"), "VpcConfig.Subnets must be exactly"),
    "a foreign image": (
        lambda r: r["AlgorithmSpecification"].update(TrainingImage=FOREIGN_IMAGE),
        "AlgorithmSpecification.TrainingImage must be " + FAKE_VALUES["TrainingImageUri"],
    ),
    "another role": (
        lambda r: r.update(RoleArn=ANOTHER_ROLE),
        "RoleArn must be " + FAKE_VALUES["SageMakerRoleArn"],
    ),
    "a checkpoint in another prefix": (
        lambda r: r["CheckpointConfig"].update(S3Uri=f"s3://{FAKE_VALUES['CheckpointBucket']}/other-team/"),
        f"CheckpointConfig.S3Uri must lie under s3://{FAKE_VALUES['CheckpointBucket']}/trainstack-",
    ),
    "another security group": (
        lambda r: r["VpcConfig"].update(SecurityGroupIds=["sg-0fffffffffffffff0"]),
        "VpcConfig.SecurityGroupIds must be exactly",
    ),
    "a dataset channel elsewhere": (
        lambda r: r["InputDataConfig"].append(
            {
                "ChannelName": "extra",
                "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://elsewhere/data/"}},
            }
        ),
        "InputDataConfig: an S3DataSource.S3Uri must lie under one of",
    ),
    # A team's own code (trainstack.team_code): only from its own code prefix, at a digest's address.
    "another team's code": (
        lambda r: r["HyperParameters"].update(_code(f"code/trainstack-vision/{'0' * 64}/sourcedir.tar.gz")),
        "HyperParameters.sagemaker_submit_directory must be the team's code, "
        f"s3://{FAKE_VALUES['ArtifactBucket']}/code/trainstack/<sha256",
    ),
    "code at no digest's address": (
        lambda r: r["HyperParameters"].update(_code("code/trainstack/latest/sourcedir.tar.gz")),
        "HyperParameters.sagemaker_submit_directory must be the team's code",
    ),
    "a program outside the code directory": (
        lambda r: r["HyperParameters"].update(
            {**_code(f"code/trainstack/{'0' * 64}/sourcedir.tar.gz"), "sagemaker_program": '"a/../../x.py"'}
        ),
        "HyperParameters.sagemaker_program must be a relative path",
    ),
    "a destination the pipeline never sends": (
        lambda r: r.update(ProfilerConfig={"S3OutputPath": "s3://elsewhere/"}),
        "request may hold only the fields the pipeline sends",
    ),
}
DIRECT_ROGUE = {**ROGUE, "600 x p5": (_many_p5(600), "ResourceConfig asks for 600 x ml.p5.48xlarge")}


def attempt_input(request: dict[str, Any]) -> dict[str, Any]:
    """The attempt machine's input as the pipeline gives it, with a time limit the job never reaches."""
    far = 10**13  # epoch milliseconds, in the year 2286
    return {"request": request, "runName": RUN, "stopAtMillis": far, "timeLimitSeconds": far, "throttles": 0}


@pytest.mark.parametrize("case", sorted(DIRECT_ROGUE))
def test_a_rogue_request_to_the_attempt_machine_is_refused_before_any_job(interpreter, pipeline, case):
    sm = interpreter()
    edit, cause = DIRECT_ROGUE[case]
    outcome = harness.run(sm.attempt_arn, attempt_input(_edited(own_request(pipeline), edit)))
    assert (outcome.status, outcome.error) == ("FAILED", "RequestRefused")
    assert outcome.cause.startswith(cause), outcome.cause
    assert sm.fake.create_calls == 0


def test_the_pipelines_own_request_passes_the_attempt_machines_check(interpreter, pipeline):
    sm = interpreter()
    outcome = harness.run(sm.attempt_arn, attempt_input(own_request(pipeline)))
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert outcome.output["status"] == "Completed" and sm.fake.create_calls == 1


def test_a_rogue_request_to_the_registration_machine_is_refused_before_any_evaluation_job(
    interpreter, pipeline
):
    sm = interpreter()
    request = _edited(own_request(pipeline, "small-torchrun"), lambda r: r.update(RoleArn=ANOTHER_ROLE))
    registration = {
        "profile": "small-torchrun",
        "runName": RUN,
        "executionArn": "arn:execution",
        "request": request,
        "attempts": 1,
        "modelArtifacts": f"s3://{FAKE_VALUES['ArtifactBucket']}/{RUN}/{RUN}-1/output/model/",
    }
    outcome = harness.run(sm.registration_arn, registration)
    assert (outcome.status, outcome.error) == ("FAILED", "RequestRefused")
    assert outcome.cause.startswith("RoleArn must be"), outcome.cause
    elsewhere = {
        **registration,
        "request": own_request(pipeline, "small-torchrun"),
        "modelArtifacts": "s3://x/m/",
    }
    outcome = harness.run(sm.registration_arn, elsewhere, name="exec-2")
    assert (outcome.error, outcome.cause) == (
        "RequestRefused",
        f"modelArtifacts must lie under s3://{FAKE_VALUES['ArtifactBucket']}/trainstack-.",
    )
    assert sm.fake.create_calls == 0


QUEUED_ROGUE = {
    **ROGUE,
    "64 x p5": (
        _many_p5(64),
        "ResourceConfig asks for 64 x ml.p5.48xlarge; the profiles allow a whole number from 1 to 2.",
    ),
    "a share in a queue without shares": (None, "share must be null"),
}


# The FIFO queue's synthesized app (a module fixture of the queue scenarios).
fifo_pipeline = queue_scenario.fifo_pipeline


@pytest.fixture
def fifo_queue(fifo_pipeline, monkeypatch):
    """The synthesized FIFO queue pipeline (queue.max_instances 2) against FakeBatch."""
    context, queue = queue_scenario.queue_for(fifo_pipeline, monkeypatch, [[STARTING, TRAINING, COMPLETED]])
    yield queue
    context.__exit__(None, None, None)


@pytest.mark.parametrize("case", sorted(QUEUED_ROGUE))
def test_a_rogue_request_to_the_queued_attempt_machine_is_refused_before_any_submit(
    fifo_queue,
    fifo_pipeline,
    pipeline,
    case,
):
    edit, cause = QUEUED_ROGUE[case]
    request = own_request(pipeline, settings=fifo_pipeline.settings)
    value = attempt_input(request if edit is None else _edited(request, edit))
    if edit is None:
        value["share"] = "teamA"
    outcome = harness.run(state_machine_arn("trainstack-pipeline-attempt"), value)
    assert (outcome.status, outcome.error) == ("FAILED", "RequestRefused")
    assert outcome.cause.startswith(cause), outcome.cause
    assert [operation for operation, _ in fifo_queue.batch.calls if operation == "SubmitServiceJob"] == []
    assert fifo_queue.sagemaker.create_calls == 0


def test_the_pipelines_own_request_passes_the_queued_attempt_machines_check(
    fifo_queue,
    fifo_pipeline,
    pipeline,
):
    request = own_request(pipeline, settings=fifo_pipeline.settings)
    outcome = harness.run(state_machine_arn("trainstack-pipeline-attempt"), attempt_input(request))
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert outcome.output["status"] == "Completed"
    assert [operation for operation, _ in fifo_queue.batch.calls].count("SubmitServiceJob") == 1
