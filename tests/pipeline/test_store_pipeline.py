"""Each checkpoint store through the synthesized pipeline in the emulator (tests/checkpoint_store_modes.py:
every profile on the store): the request SageMaker receives for a run resumed from a checkpoint or from a
model equals the Python builder's, its resume source goes where the store reads it (s3-direct,
s3-express: train.py's `resume_from`; the others: the `resume` channel), and the attempt machine's
request guard lets the pipeline's own request through but refuses one whose train.py checkpoint or
resume location lies elsewhere."""

from __future__ import annotations

import copy

import pytest

from localaws.sagemaker import STARTING, evaluated
from tests.checkpoint_store_modes import STORE_MODES, STORES
from tests.conftest import NO_ENV, default_config_data, synthesize
from tests.pipeline import harness
from tests.pipeline.conftest import FAKE_VALUES, synthesized_pipeline
from tests.pipeline.test_fault_drills import SUCCESS
from tests.pipeline.test_plan_endings import PLAN_ENDING
from tests.pipeline.test_request_guard import attempt_input
from tests.pipeline.test_scenarios import assert_same_request, execution_arn
from trainstack.checkpoint_requests import checkpoint_uri
from trainstack.checkpoint_stores import S3_DIRECT_STORES
from trainstack.execution_input import validate_execution_input
from trainstack.job_request import RunRequest, build_create_training_job_request

CHECKPOINTS = f"s3://{FAKE_VALUES['CheckpointBucket']}/trainstack-earlier/"
MODEL = f"s3://{FAKE_VALUES['ArtifactBucket']}/trainstack-earlier/trainstack-earlier-1/output/model/"
RUN = "trainstack-stored"


@pytest.fixture(scope="module", params=sorted(STORES))
def pipeline(request, tmp_path_factory):
    """The app with every profile on the store (governance none: the definitions do not depend on it)."""
    from trainstack.config_loading import parse_settings

    mode = f"store-{request.param}-none"
    settings = parse_settings(STORE_MODES[mode](default_config_data()), NO_ENV, source=mode)
    stacks, assembly = synthesize(settings, tmp_path_factory.mktemp(f"{mode}.cdk.out"))
    return synthesized_pipeline(settings, stacks, assembly)


def store_of(pipeline) -> str:
    [store] = {profile.checkpoint_store for profile in pipeline.settings.profiles}
    return store


@pytest.mark.parametrize("source", [CHECKPOINTS, MODEL], ids=["checkpoint", "model"])
def test_a_resumed_runs_request_equals_the_builders_and_reads_the_source_where_the_store_does(
    interpreter, pipeline, source
):
    execution_input = {"profile": "small-torchrun", "runName": RUN, "resumeFrom": source}
    if source == MODEL:
        execution_input["hyperparameters"] = {"init_from": "/opt/ml/input/data/resume"}
    sm = interpreter(job_scripts=[SUCCESS], evaluation_script=evaluated(2.0))
    outcome = sm.run(execution_input, name="stored")
    assert outcome.status == "SUCCEEDED", outcome.cause
    run = validate_execution_input(execution_input, pipeline.settings, "stored")
    profile = pipeline.settings.profile("small-torchrun")
    expected = build_create_training_job_request(
        profile, pipeline.resources, run, 1, execution_arn("stored"), namespace=pipeline.settings.project
    )
    assert_same_request(sm.fake.created[:1], [expected])  # the evaluation job follows
    [received] = sm.fake.created[:1]
    channels = {channel["ChannelName"] for channel in received["InputDataConfig"]}
    direct = store_of(pipeline) in S3_DIRECT_STORES and source == CHECKPOINTS
    # Read per rank by train.py, or downloaded whole to every node as the `resume` channel.
    assert received["HyperParameters"].get("resume_from") == (source if direct else None)
    assert ("resume" in channels) == (not direct)
    assert outcome.output["checkpointUri"] == checkpoint_uri(profile, pipeline.resources, RUN)


def own_request(pipeline, resume_from: str | None = CHECKPOINTS) -> dict:
    profile = pipeline.settings.profile("llama-7b-smp")
    run = RunRequest(profile=profile.name, run_name=RUN, resume_from=resume_from)
    return build_create_training_job_request(profile, pipeline.resources, run, 1, "arn:execution")


def test_the_pipelines_own_resumed_request_passes_the_attempt_machines_check(interpreter, pipeline):
    sm = interpreter()
    outcome = harness.run(sm.attempt_arn, attempt_input(own_request(pipeline)))
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert sm.fake.create_calls == 1


ELSEWHERE = "s3://someone-elses-bucket/trainstack-stored/"


@pytest.mark.parametrize(
    "name, value, cause",
    [
        (
            "checkpoint_dir",
            ELSEWHERE,
            "HyperParameters.checkpoint_dir must lie under one of ",
        ),
        (
            "checkpoint_dir",
            f"s3://{FAKE_VALUES['CheckpointBucket']}/trainstack-x/../other-team/",
            "HyperParameters.checkpoint_dir must be a normalized location, with no . or .. segment and no //",
        ),
        ("resume_from", ELSEWHERE, "HyperParameters.resume_from must lie under "),
        (
            "resume_from",
            f"s3://{FAKE_VALUES['CheckpointBucket']}/other-team-run/",
            "HyperParameters.resume_from must lie under ",
        ),
    ],
)
def test_a_request_pointing_train_py_elsewhere_is_refused_before_any_job(
    interpreter, pipeline, name, value, cause
):
    """Whatever the store: a request naming where train.py writes or reads checkpoints itself names a place
    the profiles' stores allow (the attempt machine can be started directly with any request)."""
    sm = interpreter()
    request = copy.deepcopy(own_request(pipeline))
    request["HyperParameters"][name] = value
    outcome = harness.run(sm.attempt_arn, attempt_input(request))
    assert (outcome.status, outcome.error) == ("FAILED", "RequestRefused")
    assert outcome.cause.startswith(cause), outcome.cause
    if name == "resume_from" and store_of(pipeline) == "sagemaker-sync":
        assert (
            outcome.cause
            == "HyperParameters.resume_from must lie under nothing: no profile reads it, with no ..."
        )
    assert sm.fake.create_calls == 0


def test_a_plan_ending_with_no_preference_left_names_the_stores_checkpoints(interpreter, pipeline):
    """The cause names where the run's checkpoints are, for every store: SageMaker's sync target or
    train.py's own checkpoint_dir (before: CheckpointConfig only, so an empty location for s3-direct)."""
    sm = interpreter(job_scripts=[[STARTING, PLAN_ENDING]])
    outcome = sm.run({"runName": "trainstack-planend"})
    assert (outcome.status, outcome.error) == ("FAILED", "CapacityExhausted")
    profile = pipeline.settings.profile("llama-7b-smp")
    location = checkpoint_uri(profile, pipeline.resources, "trainstack-planend")
    assert f"the checkpoints in {location} resume the run" in outcome.cause, outcome.cause
