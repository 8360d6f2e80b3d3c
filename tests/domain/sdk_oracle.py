"""A second oracle for the launch hyperparameters: what AWS's own SDK sends for each shipped profile.

Runs `sagemaker.pytorch.PyTorch(...).fit()` (PyPI `sagemaker` 2.x) for every profile of the shipped configs,
with the SDK distribution that names the profile's strategy, against a stubbed session: the
CreateTrainingJob request is captured where the SDK hands it to the SageMaker client, and nothing reaches
AWS (telemetry is opted out; any AWS request or telemetry call the SDK attempts fails the run). Writes the
requests' HyperParameters to sdk_hyperparameters.json beside this file, which
tests/domain/test_sdk_oracle.py compares with ours.

It lives beside its fixture and test, not in the product: the SDK is no dependency of trainstack and runs
only in a throwaway environment (docs/container.md, "Launch"):

    python3 -m venv /tmp/sdk-venv && /tmp/sdk-venv/bin/pip install "sagemaker>=2,<3"
    PYTHONPATH=. /tmp/sdk-venv/bin/python tests/domain/sdk_oracle.py
"""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import boto3
import sagemaker.telemetry.telemetry_logging
from sagemaker.pytorch import PyTorch
from sagemaker.session import Session

from trainstack.config_loading import load_settings
from trainstack.job_request import launch_hyperparameters
from trainstack.launch_flags import MPIRUN_STOP_OPTIONS
from trainstack.profiles import Profile

REPO = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).with_name("sdk_hyperparameters.json")
SHIPPED_CONFIGS = [REPO / "config" / "default.yaml", *sorted((REPO / "config" / "examples").glob("*.yaml"))]
ROLE = "arn:aws:iam::111111111111:role/trainstack-sagemaker"
IMAGE = "111111111111.dkr.ecr.us-east-1.amazonaws.com/trainstack-training:latest"
# The SDK uploads a local entry point's folder to S3; an S3 source_dir is used as it is.
SOURCE = "s3://trainstack-artifacts/code/sourcedir.tar.gz"


def distribution(profile: Profile) -> dict:
    """The SDK's `distribution` for the strategy, as AWS documents each (PyTorch estimator docs; SMP v2 and
    SMDDP pages), carrying our values where the SDK takes them."""
    if profile.strategy == "torchrun":
        return {"torch_distributed": {"enabled": True}}
    if profile.strategy == "smp":
        parameters = launch_hyperparameters(profile)["mp_parameters"]
        return {
            "torch_distributed": {"enabled": True},
            "smdistributed": {"modelparallel": {"enabled": True, "parameters": parameters}},
        }
    if profile.strategy == "smddp":
        return {
            "smdistributed": {"dataparallel": {"enabled": True, "custom_mpi_options": MPIRUN_STOP_OPTIONS}}
        }
    return {
        "mpi": {
            "enabled": True,
            "processes_per_host": profile.processes_per_host,
            "custom_mpi_options": MPIRUN_STOP_OPTIONS,
        }
    }


class CapturingClient:
    """The SageMaker client's one call the SDK makes here."""

    def __init__(self):
        self.requests: list[dict] = []

    def create_training_job(self, **request):
        self.requests.append(request)
        arn = "arn:aws:sagemaker:us-east-1:111111111111:training-job/"
        return {"TrainingJobArn": arn + request["TrainingJobName"]}


class OfflineSession(Session):
    """The bucket exists (the SDK would ask S3 the first time it names its default bucket)."""

    def default_bucket(self):
        return "trainstack-artifacts"


def refuse(*args, **kwargs):
    raise RuntimeError("the SDK tried to reach AWS; the oracle runs offline")


def sdk_hyperparameters(profile: Profile) -> dict[str, str]:
    client = CapturingClient()
    boto_session = boto3.Session(region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    boto_session.events.register("before-send", refuse)  # any AWS call the SDK makes fails the run
    session = OfflineSession(
        boto_session=boto_session,
        sagemaker_client=client,
        sagemaker_config={
            "SchemaVersion": "1.0",
            "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}},
        },
    )
    preference = profile.instance_preferences[0]
    estimator = PyTorch(
        entry_point=profile.entry_point,
        source_dir=SOURCE,
        role=ROLE,
        image_uri=IMAGE,
        framework_version="2.5.1",  # the image's PyTorch (docs/container.md)
        py_version="py311",
        instance_type=preference.instance_type,
        instance_count=preference.instance_count,
        distribution=distribution(profile),
        hyperparameters=dict(profile.hyperparameters),
        sagemaker_session=session,
        disable_profiler=True,
    )
    estimator.fit(job_name=f"oracle-{profile.name}", wait=False, logs=False)
    (request,) = client.requests
    return request["HyperParameters"]


def main() -> None:
    sagemaker.telemetry.telemetry_logging._send_telemetry_request = refuse
    profiles = {}
    for config in SHIPPED_CONFIGS:
        for profile in load_settings(config, environ={}).profiles:
            profiles[f"{config.stem}:{profile.name}"] = {
                "distribution": distribution(profile),
                "hyperparameters": sdk_hyperparameters(profile),
            }
    fixture = {"sagemaker": version("sagemaker"), "profiles": profiles}
    FIXTURE.write_text(json.dumps(fixture, indent=2, sort_keys=True) + "\n")
    print(f"wrote {FIXTURE.relative_to(REPO)}: {len(profiles)} profiles, sagemaker {fixture['sagemaker']}")


if __name__ == "__main__":
    main()
