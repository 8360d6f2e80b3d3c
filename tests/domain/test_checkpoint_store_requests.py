"""Each checkpoint store's CreateTrainingJob request: valid against botocore's SageMaker model, and where
train.py finds its checkpoints (trainstack.job_request, docs/training.md "Checkpoint stores")."""

from __future__ import annotations

import dataclasses
import re

import pytest

from tests.conftest import default_config_data
from tests.domain.conftest import FSX_RESOURCES
from tests.domain.sagemaker_model import problems
from tests.domain.test_job_request import EXECUTION, custom
from trainstack.checkpoint_stores import CHECKPOINT_STORES
from trainstack.config_loading import ConfigError, parse_settings
from trainstack.express_buckets import ExpressBuckets, express_buckets
from trainstack.job_request import RunRequest, build_create_training_job_request

RESOURCES = dataclasses.replace(
    FSX_RESOURCES,
    express_checkpoint_bucket="trainstack-checkpoints--use1-az4--x-s3",
    region="us-east-1",
    checkpoint_file_system_path="/abcdefgh/checkpoints/trainstack",
)
RUN = RunRequest(profile="custom", run_name="trainstack-run")
CAPS = {"max_instances": 4, "max_runtime_hours": 72, "max_cost_usd": 1_000_000}
WHERE = {
    "sagemaker-sync": None,
    "s3-direct": "s3://trainstack-checkpoints/trainstack-run/",
    "s3-express": "s3://trainstack-checkpoints--use1-az4--x-s3/trainstack-run/",
    "fsx": "/opt/ml/input/data/checkpoints/trainstack-run/",
}


@pytest.mark.parametrize("store", CHECKPOINT_STORES)
def test_each_store_builds_a_valid_request_naming_its_checkpoint_location(store):
    request = build_create_training_job_request(custom(checkpoint_store=store), RESOURCES, RUN, 1, EXECUTION)
    assert problems("CreateTrainingJob", request) == []
    hyperparameters = request["HyperParameters"]
    if store == "sagemaker-sync":
        assert request["CheckpointConfig"] == {
            "LocalPath": "/opt/ml/checkpoints",
            "S3Uri": "s3://trainstack-checkpoints/trainstack-run/",
        }
        assert "checkpoint_dir" not in hyperparameters
    else:  # no sync: nothing is downloaded to every node before training starts
        assert "CheckpointConfig" not in request
        assert hyperparameters["checkpoint_dir"] == WHERE[store]
    channels = {channel["ChannelName"]: channel for channel in request["InputDataConfig"]}
    if store == "fsx":
        assert hyperparameters["checkpoint_dir_shared"] == "true"
        assert channels["checkpoints"]["DataSource"]["FileSystemDataSource"] == {
            "FileSystemId": "fs-0123456789abcdef0",
            "FileSystemType": "FSxLustre",
            "DirectoryPath": "/abcdefgh/checkpoints/trainstack",
            "FileSystemAccessMode": "rw",
        }
    else:
        assert "checkpoints" not in channels and "checkpoint_dir_shared" not in hyperparameters
    # s3-express: the connector's Region, for the directory bucket's zonal endpoint
    assert ("AWS_REGION" in request["Environment"]) == (store == "s3-express")
    if store == "s3-express":
        assert request["Environment"]["AWS_REGION"] == "us-east-1"


def test_a_run_cannot_point_train_py_elsewhere():
    with pytest.raises(ValueError, match="checkpoint_dir is set from the profile"):
        custom(hyperparameters={"checkpoint_dir": "/tmp/elsewhere"})


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"checkpoint_store": "nfs"},
            "profiles.0.checkpoint_store: Input should be 'sagemaker-sync', 's3-direct'",
        ),
        (
            {"checkpoint_store": "s3-express"},
            "profiles.0.checkpoint_store: s3-express needs the training AZ by id (availability_zone_id, "
            "like use1-az4, instead of availability_zone us-east-1a): S3 names a directory bucket's zone by "
            "AZ id",
        ),
    ],
)
def test_a_wrong_store_is_named_in_one_sentence(change, message):
    data = default_config_data()
    data["profiles"][0].update(change)
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_settings(data, {}, source="config.yaml")


def test_fsx_needs_the_file_system():
    data = default_config_data()
    data["fsx"] = {"enabled": False}
    data["profiles"][0]["checkpoint_store"] = "fsx"
    with pytest.raises(
        ConfigError, match=r"profiles.0.checkpoint_store: fsx needs the deployment's file system"
    ):
        parse_settings(data, {}, source="config.yaml")


@pytest.mark.parametrize("deployment_type", ["SCRATCH_2", "PERSISTENT_2"])
def test_fsx_checkpoints_are_allowed_on_both_deployment_types(deployment_type):
    """Both export the checkpoints to S3 (automatic export: every Lustre 2.12/2.15 file system but scratch
    1, FSx for Lustre user guide), so SCRATCH_2, which keeps one copy, is no longer refused."""
    data = default_config_data()
    data["fsx"] = {**data["fsx"], "deployment_type": deployment_type}
    data["profiles"][0]["checkpoint_store"] = "fsx"
    assert parse_settings(data, {}, source="config.yaml").profiles[0].checkpoint_store == "fsx"


def test_s3_express_names_one_directory_bucket_per_team_in_the_training_zone():
    """Without teams the project's bucket; with teams one per team that runs an s3-express profile, each
    `<namespace>-ckpt-<account>--<zone id>--x-s3` (S3's directory bucket naming rules)."""
    data = default_config_data()
    del data["availability_zone"]
    data["availability_zone_id"] = "use1-az4"
    data["profiles"][1]["checkpoint_store"] = "s3-express"
    settings = parse_settings(data, {}, source="config.yaml")
    assert express_buckets(settings) == ExpressBuckets(
        "use1-az4", {"trainstack": "trainstack-ckpt-111111111111--use1-az4--x-s3"}
    )
    first, second = data["profiles"][0]["name"], data["profiles"][1]["name"]
    role = "arn:aws:iam::111111111111:role/"
    data["teams"] = [
        {"name": "alpha", "profiles": [first], "principals": [f"{role}alpha"], **CAPS},
        {"name": "beta", "profiles": [first, second], "principals": [f"{role}beta"], **CAPS},
    ]
    assert express_buckets(parse_settings(data, {}, source="config.yaml")).names == {
        "trainstack-beta": "trainstack-beta-ckpt-111111111111--use1-az4--x-s3"
    }


def test_a_directory_bucket_name_s3_would_refuse_is_named_in_one_sentence():
    """S3 allows 63 characters: the longest project (21) and team (12) names leave no room for the suffix."""
    data = default_config_data()
    del data["availability_zone"]
    data["availability_zone_id"] = "use1-az4"
    data["project"] = "a" * 21
    data["profiles"][1].update(checkpoint_store="s3-express", name="p")  # run names leave room
    data["teams"] = [
        {"name": "b" * 12, "profiles": ["p"], "principals": ["arn:aws:iam::111111111111:role/ml"], **CAPS}
    ]
    name = f"{'a' * 21}-{'b' * 12}-ckpt-111111111111--use1-az4--x-s3"
    refusal = f"project: the s3-express directory bucket {name} is not a name S3 accepts (68 characters"
    with pytest.raises(ConfigError, match=re.escape(refusal)):
        parse_settings(data, {}, source="config.yaml")


CHECKPOINT_RESUME = "s3://trainstack-checkpoints/trainstack-earlier/"
EXPRESS_RESUME = "s3://trainstack-checkpoints--use1-az4--x-s3/trainstack-earlier/step_000000100/"
MODEL_RESUME = "s3://trainstack-artifacts/trainstack-earlier/trainstack-earlier-1/output/model/"
# (store, resumeFrom) -> read by train.py itself (hyperparameter resume_from), else the `resume` channel.
READS_DIRECTLY = {
    ("s3-direct", CHECKPOINT_RESUME): True,
    ("s3-direct", EXPRESS_RESUME): True,
    ("s3-express", CHECKPOINT_RESUME): True,
    ("s3-express", EXPRESS_RESUME): True,
}


@pytest.mark.parametrize("resume_from", [CHECKPOINT_RESUME, EXPRESS_RESUME, MODEL_RESUME])
@pytest.mark.parametrize("store", CHECKPOINT_STORES)
def test_resume_from_goes_to_train_py_where_the_store_reads_s3_itself_and_is_a_channel_elsewhere(
    store, resume_from
):
    """s3-direct and s3-express read a checkpoint's shards per rank (no download to every node); a model
    output (a profile's init_from reads a directory) and the other stores keep the `resume` channel."""
    run = dataclasses.replace(RUN, resume_from=resume_from)
    request = build_create_training_job_request(custom(checkpoint_store=store), RESOURCES, run, 1, EXECUTION)
    assert problems("CreateTrainingJob", request) == []
    channels = {channel["ChannelName"]: channel for channel in request["InputDataConfig"]}
    if READS_DIRECTLY.get((store, resume_from), False):
        assert request["HyperParameters"]["resume_from"] == resume_from
        assert "resume" not in channels
    else:
        assert "resume_from" not in request["HyperParameters"]
        assert channels["resume"]["DataSource"]["S3DataSource"]["S3Uri"] == resume_from


def test_a_run_cannot_name_the_resume_source_itself():
    """resume_from comes from resumeFrom, which the input rules check (own-runs) before any job."""
    with pytest.raises(ValueError, match="resume_from is set from the profile"):
        custom(hyperparameters={"resume_from": "s3://someone-elses-bucket/run/"})
