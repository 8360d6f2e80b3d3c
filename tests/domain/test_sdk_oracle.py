"""Our launch hyperparameters against AWS's SDK (sagemaker 2.x `PyTorch(...)`, recorded by sdk_oracle.py into
sdk_hyperparameters.json): the keys the toolkit reads (`sagemaker_*` and `mp_parameters`) must decode to the
same values, and each key only the SDK sends is one whose absence the toolkit covers (docs/container.md)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tests.domain.conftest import shipped_resources
from tests.domain.test_job_request import toolkit_value
from trainstack.config_loading import load_settings
from trainstack.job_request import base_request

REPO = Path(__file__).resolve().parents[2]
ORACLE = json.loads(Path(__file__).with_name("sdk_hyperparameters.json").read_text())
SHIPPED_CONFIGS = [REPO / "config" / "default.yaml", *sorted((REPO / "config" / "examples").glob("*.yaml"))]
SHIPPED = {
    f"{config.stem}:{profile.name}": profile
    for config in SHIPPED_CONFIGS
    for profile in load_settings(config, environ={}).profiles
}
# Keys the SDK adds and we leave out, with the value the toolkit uses instead (sagemaker-training 5.1.4).
SDK_ONLY = {
    # environment.py: log_level defaults to logging.INFO.
    "sagemaker_container_log_level": lambda value: value == logging.INFO,
    # The job's name, region and code reach the container without it: SageMaker sets TRAINING_JOB_NAME
    # (the toolkit's job_name), the region comes from boto3's session in the container, and the code is
    # in the image at /opt/ml/code, the toolkit's default module_dir.
    "sagemaker_job_name": lambda value: value.startswith("oracle-"),
    "sagemaker_region": lambda value: value == "us-east-1",
    "sagemaker_submit_directory": lambda value: value.startswith("s3://"),
    # SMDDP's runner reads it first, else resourceconfig.json's current_instance_type (smdataparallel.py
    # _get_instance_type): with InstancePreferences only the latter names the type SageMaker chose.
    "sagemaker_instance_type": lambda value: value.startswith("ml."),
    # The SDK writes false for SMP; absent, the toolkit reads False (training.py, .get(..., False)).
    "sagemaker_distributed_dataparallel_enabled": lambda value: value is False,
}


def toolkit_keys(hyperparameters: dict[str, str]) -> dict[str, object]:
    return {
        name: toolkit_value(value)
        for name, value in hyperparameters.items()
        if name.startswith("sagemaker_") or name == "mp_parameters"
    }


def test_the_oracle_covers_every_shipped_profile():
    assert set(ORACLE["profiles"]) == set(SHIPPED), "rerun tests/domain/sdk_oracle.py (module docstring)"
    assert ORACLE["sagemaker"].startswith("2.")


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_the_toolkit_reads_the_same_launch_settings_from_our_request_as_from_the_sdks(name):
    ours = toolkit_keys(base_request(SHIPPED[name], shipped_resources(SHIPPED[name]))["HyperParameters"])
    sdk = toolkit_keys(ORACLE["profiles"][name]["hyperparameters"])
    assert set(ours) <= set(sdk), "we send a launch key the SDK does not"
    assert {key: sdk[key] for key in ours} == ours
    for key in set(sdk) - set(ours):
        assert key in SDK_ONLY and SDK_ONLY[key](sdk[key]), (key, sdk[key])
