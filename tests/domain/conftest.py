"""Fixtures for the pipeline domain: the default config's settings and deploy-time resources."""

from __future__ import annotations

import dataclasses

import pytest

from tests.conftest import DEFAULT_CONFIG, NO_ENV
from trainstack.config_loading import load_settings
from trainstack.job_request import PipelineResources

FSX_RESOURCES = PipelineResources(
    role_arn="arn:aws:iam::111111111111:role/trainstack-sagemaker",
    image_uri="111111111111.dkr.ecr.us-east-1.amazonaws.com/trainstack:latest",
    job_name_prefix="trainstack",
    checkpoint_bucket="trainstack-checkpoints",
    artifact_bucket="trainstack-artifacts",
    dataset_bucket="trainstack-datasets",
    dataset_prefix="datasets/",
    subnet_ids=("subnet-0123456789abcdef0",),
    security_group_ids=("sg-0123456789abcdef0",),
    file_system_id="fs-0123456789abcdef0",
    file_system_directory_path="/abcdefgh/datasets",
    checkpoint_file_system_path="/abcdefgh/checkpoints/all",
)
S3_RESOURCES = dataclasses.replace(
    FSX_RESOURCES, file_system_id=None, file_system_directory_path=None, checkpoint_file_system_path=None
)

EXPRESS_RESOURCES = dataclasses.replace(
    S3_RESOURCES,
    express_checkpoint_bucket="trainstack-ckpt-111111111111--use1-az4--x-s3",
    region="us-east-1",
)


def shipped_resources(profile) -> PipelineResources:
    """What a shipped profile's request is built against: S3 alone, or what its store needs besides (the
    file system for fsx, the team's directory bucket and the Region for s3-express)."""
    return {"fsx": FSX_RESOURCES, "s3-express": EXPRESS_RESOURCES}.get(profile.checkpoint_store, S3_RESOURCES)


@pytest.fixture(scope="session")
def settings():
    return load_settings(DEFAULT_CONFIG, environ=NO_ENV)
