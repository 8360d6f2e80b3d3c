"""CreateTrainingJob requests: valid against botocore's SageMaker model, and what each profile implies."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from tests.conftest import default_config_data
from tests.domain.conftest import FSX_RESOURCES, S3_RESOURCES
from tests.domain.sagemaker_model import problems
from training_scripts.metrics import METRIC_DEFINITIONS
from trainstack.checkpoint_requests import checkpoint_uri, resume_channel
from trainstack.config_loading import ConfigError
from trainstack.job_request import (
    RunRequest,
    base_request,
    build_create_training_job_request,
    instance_preferences,
    job_name,
    max_runtime_seconds,
    output_path,
    tags,
    tensorboard_uri,
)
from trainstack.launch_flags import MPIRUN_STOP_OPTIONS
from trainstack.profiles import Profile

EXECUTION = "arn:aws:states:us-east-1:111111111111:execution:trainstack-pipeline:0b6f7c1e"
RUNS = {
    "plain": RunRequest(profile="", run_name="trainstack-plain"),
    "overrides": RunRequest(
        profile="",
        run_name="trainstack-overrides",
        hyperparameters={"learning_rate": "1e-4", "max_steps": "50"},
        instance_count=4,
        max_runtime_hours=2.5,
        resume_from="s3://trainstack-checkpoints/trainstack-old-run/",
    ),
}


def toolkit_value(encoded: str) -> Any:
    """How sagemaker-training reads a hyperparameter: json.loads, else the raw string."""
    try:
        return json.loads(encoded)
    except ValueError:
        return encoded


def build(profile: Profile, run: RunRequest = RUNS["plain"], attempt: int = 1, resources=FSX_RESOURCES):
    return build_create_training_job_request(profile, resources, run, attempt, EXECUTION)


def custom(**fields: Any) -> Profile:
    return Profile.model_validate(
        {
            "name": "custom",
            "strategy": "torchrun",
            "instance_preferences": [{"instance_type": "ml.p5.48xlarge"}],
            **fields,
        }
    )


@pytest.mark.parametrize("resources", [FSX_RESOURCES, S3_RESOURCES], ids=["fsx", "s3"])
@pytest.mark.parametrize("run", list(RUNS.values()), ids=list(RUNS))
def test_every_default_profile_builds_a_request_the_sagemaker_model_accepts(settings, resources, run):
    for profile in settings.profiles:
        request = build(profile, run, attempt=3, resources=resources)
        assert problems("CreateTrainingJob", request) == [], profile.name


def test_optional_features_build_valid_requests():
    profile = custom(
        keep_alive_seconds=1800,
        training_plan_arn="arn:aws:sagemaker:us-east-1:111111111111:training-plan/p5-plan",
        infra_check=True,
        environment={"NCCL_DEBUG": "INFO"},
        hyperparameters={"seq_len": "2048"},
    )
    request = build(profile)
    assert problems("CreateTrainingJob", request) == []
    resource_config = request["ResourceConfig"]
    assert resource_config["KeepAlivePeriodInSeconds"] == 1800
    assert resource_config["InstancePreferences"][0]["TrainingPlanArns"] == [
        "arn:aws:sagemaker:us-east-1:111111111111:training-plan/p5-plan"
    ]
    assert "TrainingPlanArn" not in resource_config
    assert request["InfraCheckConfig"] == {"EnableInfraCheck": True}
    assert request["Environment"] == {
        "NCCL_DEBUG": "INFO",
        "PET_MAX_RESTARTS": "2",
        "TRAINSTACK_EXPECTED_GPUS": "8",
    }


@pytest.mark.parametrize(
    ("fields", "flags"),
    [
        (
            {"strategy": "torchrun"},
            {
                "sagemaker_program": "train.py",
                "sagemaker_torch_distributed_enabled": True,
                "strategy": "torchrun",
            },
        ),
        (
            {"strategy": "smp", "smp": {"hybrid_shard_degree": 8, "tensor_parallel_degree": 1}},
            {
                "sagemaker_program": "train.py",
                "sagemaker_torch_distributed_enabled": True,
                "strategy": "smp",
                "mp_parameters": {"hybrid_shard_degree": 8, "tensor_parallel_degree": 1},
            },
        ),
        (
            {"strategy": "smp"},
            {
                "sagemaker_program": "train.py",
                "sagemaker_torch_distributed_enabled": True,
                "strategy": "smp",
                "mp_parameters": {},
            },
        ),
        (
            {"strategy": "smddp", "instance_preferences": [{"instance_type": "ml.p4d.24xlarge"}]},
            {
                "sagemaker_program": "train.py",
                "sagemaker_distributed_dataparallel_enabled": True,
                "sagemaker_distributed_dataparallel_custom_mpi_options": MPIRUN_STOP_OPTIONS,
                "strategy": "smddp",
            },
        ),
        (
            {
                "strategy": "mpi",
                "entry_point": "nccl_test.sh",
                "instance_preferences": [{"instance_type": "ml.g5.12xlarge", "instance_count": 2}],
            },
            {
                "sagemaker_program": "nccl_test.sh",
                "sagemaker_mpi_enabled": True,
                "sagemaker_mpi_num_of_processes_per_host": 4,
                "sagemaker_mpi_custom_mpi_options": MPIRUN_STOP_OPTIONS,
            },
        ),
    ],
    ids=["torchrun", "smp", "smp-defaults", "smddp", "mpi"],
)
def test_launch_flags_per_strategy_reach_the_toolkit_as_json(fields, flags):
    hyperparameters = build(custom(**fields))["HyperParameters"]
    assert {name: toolkit_value(value) for name, value in hyperparameters.items()} == flags
    assert all(isinstance(value, str) for value in hyperparameters.values())
    assert hyperparameters["sagemaker_program"] == json.dumps(fields.get("entry_point", "train.py"))


def test_run_hyperparameters_override_profile_defaults_and_pass_unencoded():
    profile = custom(hyperparameters={"learning_rate": "3e-4", "seq_len": "1024"})
    request = build(
        profile,
        RunRequest(
            profile="custom",
            run_name="trainstack-a",
            hyperparameters={"learning_rate": "1e-4", "note": "abc"},
        ),
    )
    hyperparameters = request["HyperParameters"]
    assert hyperparameters["learning_rate"] == "1e-4"
    assert hyperparameters["seq_len"] == "1024"
    assert toolkit_value(hyperparameters["note"]) == "abc"


def test_checkpoint_uri_is_identical_across_attempts_and_job_names_are_not(settings):
    profile = settings.profile("llama-7b-smp")
    run = RunRequest(profile=profile.name, run_name="trainstack-llama")
    requests = [build(profile, run, attempt) for attempt in (1, 2, 3)]
    assert {r["CheckpointConfig"]["S3Uri"] for r in requests} == {
        "s3://trainstack-checkpoints/trainstack-llama/"
    }
    assert {r["CheckpointConfig"]["LocalPath"] for r in requests} == {"/opt/ml/checkpoints"}
    assert [r["TrainingJobName"] for r in requests] == [
        "trainstack-llama-1",
        "trainstack-llama-2",
        "trainstack-llama-3",
    ]
    assert {r["OutputDataConfig"]["S3OutputPath"] for r in requests} == {
        "s3://trainstack-artifacts/trainstack-llama/"
    }


def test_preferences_keep_their_order_and_counts(settings):
    resource_config = build(settings.profile("llama-7b-smp"))["ResourceConfig"]
    assert resource_config["InstancePreferences"] == [
        {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 2},
        {"InstanceType": "ml.p4de.24xlarge", "InstanceCount": 2},
    ]
    assert "InstanceType" not in resource_config and "InstanceCount" not in resource_config
    assert "EnableManagedSpotTraining" not in build(settings.profile("llama-7b-smp"))


def test_instance_count_override_applies_one_count_to_every_preference(settings):
    request = build(settings.profile("llama-7b-smp"), RUNS["overrides"])
    assert request["ResourceConfig"]["InstancePreferences"] == [
        {"InstanceType": "ml.p5.48xlarge"},
        {"InstanceType": "ml.p4de.24xlarge"},
    ]
    assert request["ResourceConfig"]["InstanceCount"] == 4


def test_spot_profile_names_one_instance_type_and_a_wait_limit(settings):
    profile = settings.profile("small-torchrun")
    request = build(profile)
    assert request["EnableManagedSpotTraining"] is True
    assert request["ResourceConfig"]["InstanceType"] == "ml.g5.12xlarge"
    assert request["ResourceConfig"]["InstanceCount"] == 1
    assert "InstancePreferences" not in request["ResourceConfig"]
    assert request["StoppingCondition"] == {"MaxRuntimeInSeconds": 4 * 3600, "MaxWaitTimeInSeconds": 8 * 3600}
    overridden = build(profile, RunRequest(profile=profile.name, run_name="trainstack-s", instance_count=2))
    assert overridden["ResourceConfig"]["InstanceCount"] == 2
    assert "InstancePreferences" not in overridden["ResourceConfig"]


def test_max_runtime_override(settings):
    request = build(settings.profile("llama-1b-smddp"), RUNS["overrides"])
    assert request["StoppingCondition"] == {"MaxRuntimeInSeconds": 9000}
    # Whole seconds, rounded half to even like JSONata's $round in the state machine.
    assert max_runtime_seconds(1.234) == 4442


def test_fsx_train_channel_reads_the_file_system_read_only(settings):
    request = build(settings.profile("llama-1b-smddp"))
    assert request["InputDataConfig"] == [
        {
            "ChannelName": "train",
            "DataSource": {
                "FileSystemDataSource": {
                    "FileSystemId": "fs-0123456789abcdef0",
                    "FileSystemType": "FSxLustre",
                    "DirectoryPath": "/abcdefgh/datasets",
                    "FileSystemAccessMode": "ro",
                }
            },
            "InputMode": "File",
        }
    ]
    assert request["VpcConfig"] == {
        "SecurityGroupIds": ["sg-0123456789abcdef0"],
        "Subnets": ["subnet-0123456789abcdef0"],
    }


def test_without_fsx_the_train_channel_streams_the_dataset_prefix(settings):
    (channel,) = build(settings.profile("llama-1b-smddp"), resources=S3_RESOURCES)["InputDataConfig"]
    assert channel["ChannelName"] == "train"
    assert channel["DataSource"]["S3DataSource"]["S3Uri"] == "s3://trainstack-datasets/datasets/"
    assert channel["InputMode"] == "FastFile"


def test_resume_from_adds_a_resume_channel(settings):
    channels = build(settings.profile("llama-1b-smddp"), RUNS["overrides"])["InputDataConfig"]
    assert [channel["ChannelName"] for channel in channels] == ["train", "resume"]
    assert (
        channels[1]["DataSource"]["S3DataSource"]["S3Uri"]
        == "s3://trainstack-checkpoints/trainstack-old-run/"
    )


def test_tags_carry_execution_and_run_name(settings):
    request = build(settings.profile("nccl-test"))
    assert request["Tags"] == [
        {"Key": "trainstack:execution", "Value": EXECUTION},
        {"Key": "trainstack:run", "Value": "trainstack-plain"},
    ]
    without_execution = build_create_training_job_request(
        settings.profile("nccl-test"), FSX_RESOURCES, RUNS["plain"], 1
    )
    assert without_execution["Tags"] == [{"Key": "trainstack:run", "Value": "trainstack-plain"}]


def test_metric_definitions_come_from_the_training_scripts(settings):
    definitions = build(settings.profile("llama-7b-smp"))["AlgorithmSpecification"]["MetricDefinitions"]
    assert definitions == METRIC_DEFINITIONS
    assert {"train:loss", "train:tokens_per_second"} <= {d["Name"] for d in definitions}


@pytest.mark.parametrize(
    ("fields", "restarts"),
    [
        ({}, "2"),  # torchrun's default budget
        ({"in_job_restarts": {"max_restarts": 5}}, "5"),
        ({"in_job_restarts": {"max_restarts": 0}}, "0"),
        ({"strategy": "smp"}, "2"),
        ({"strategy": "smddp", "instance_preferences": [{"instance_type": "ml.p4d.24xlarge"}]}, None),
        ({"strategy": "mpi", "entry_point": "nccl_test.sh"}, None),
    ],
    ids=["default", "five", "off", "smp", "smddp", "mpi"],
)
def test_torchrun_restarts_its_workers_inside_the_job_as_the_profile_allows(fields, restarts):
    # torchrun reads --max-restarts from PET_MAX_RESTARTS (torch/distributed/argparse_util.py); mpirun
    # cannot restart its ranks, so smddp and mpi jobs get no budget.
    assert build(custom(**fields))["Environment"].get("PET_MAX_RESTARTS") == restarts


def test_expected_gpus_only_when_every_preferred_type_agrees():
    assert build(custom())["Environment"]["TRAINSTACK_EXPECTED_GPUS"] == "8"
    mixed = custom(
        instance_preferences=[{"instance_type": "ml.g5.48xlarge"}, {"instance_type": "ml.g5.12xlarge"}]
    )
    assert "TRAINSTACK_EXPECTED_GPUS" not in build(mixed)["Environment"]


@pytest.mark.parametrize("run", list(RUNS.values()), ids=list(RUNS))
def test_base_request_plus_per_run_fields_is_the_full_request(settings, run):
    """The split the state machine relies on: it fills exactly these fields into base_request."""
    for profile in settings.profiles:
        expected = build(profile, run, attempt=2)
        composed = base_request(profile, FSX_RESOURCES)
        assert not {"TrainingJobName", "Tags", "TensorBoardOutputConfig"} & set(composed)
        assert "S3OutputPath" not in composed["OutputDataConfig"]
        assert "S3Uri" not in composed.get("CheckpointConfig", {})
        composed["TrainingJobName"] = job_name(run.run_name, 2)
        composed["TensorBoardOutputConfig"] = {
            "S3OutputPath": tensorboard_uri(FSX_RESOURCES, run.run_name, job_name(run.run_name, 2))
        }
        composed["OutputDataConfig"]["S3OutputPath"] = output_path(FSX_RESOURCES, run.run_name)
        if "CheckpointConfig" in composed:  # sagemaker-sync; the other stores name it in checkpoint_dir
            composed["CheckpointConfig"]["S3Uri"] = checkpoint_uri(profile, FSX_RESOURCES, run.run_name)
        else:
            composed["HyperParameters"]["checkpoint_dir"] = checkpoint_uri(
                profile, FSX_RESOURCES, run.run_name
            )
        composed["Tags"] = tags(run.run_name, EXECUTION)
        composed["HyperParameters"] = {**composed["HyperParameters"], **run.hyperparameters}
        if run.instance_count is not None:
            if not profile.managed_spot:
                composed["ResourceConfig"]["InstancePreferences"] = instance_preferences(
                    profile, counted=False
                )
            composed["ResourceConfig"]["InstanceCount"] = run.instance_count
        if run.max_runtime_hours is not None:
            composed["StoppingCondition"]["MaxRuntimeInSeconds"] = max_runtime_seconds(run.max_runtime_hours)
        if run.resume_from is not None:
            composed["InputDataConfig"].append(resume_channel(run.resume_from))
        assert composed == expected, profile.name


def test_sagemaker_model_check_catches_what_sagemaker_rejects(settings):
    """The validator used above is not vacuous: it flags bad names, counts and enum values."""
    request = build(settings.profile("llama-7b-smp"))
    request["TrainingJobName"] = "bad_name"
    request["ResourceConfig"]["InstancePreferences"] *= 3
    request["AlgorithmSpecification"]["TrainingInputMode"] = "Stream"
    found = " ".join(problems("CreateTrainingJob", request))
    assert "TrainingJobName" in found and "InstancePreferences" in found and "TrainingInputMode" in found


def test_a_training_plan_goes_on_the_instance_type_it_reserves_never_job_level():
    plan = "arn:aws:sagemaker:us-east-1:111111111111:training-plan/p5-reserved"
    profile = custom(
        instance_preferences=[
            {"instance_type": "ml.p5.48xlarge", "instance_count": 2, "training_plan_arn": plan},
            {"instance_type": "ml.p4d.24xlarge", "instance_count": 4},
        ]
    )
    for run in RUNS.values():
        request = build(profile, run)
        assert problems("CreateTrainingJob", request) == []
        resource_config = request["ResourceConfig"]
        assert "TrainingPlanArn" not in resource_config
        assert [p.get("TrainingPlanArns") for p in resource_config["InstancePreferences"]] == [[plan], None]


def test_every_job_uploads_tensorboard_data_to_its_own_prefix_of_the_runs_artifacts(settings):
    """SageMaker uploads the job's TensorBoard directory (LocalPath left to SageMaker's default,
    /opt/ml/output/tensorboard) to s3://<artifacts>/<runName>/<job>/tensorboard/: beside the job's output,
    where the SageMaker role may write (objects `<project>-*`)."""
    run = RunRequest(profile="llama-7b-smp", run_name="trainstack-tb")
    first, second = (build(settings.profile(run.profile), run, attempt=attempt) for attempt in (1, 2))
    assert first["TensorBoardOutputConfig"] == {
        "S3OutputPath": "s3://trainstack-artifacts/trainstack-tb/trainstack-tb-1/tensorboard/"
    }
    assert second["TensorBoardOutputConfig"]["S3OutputPath"].endswith("/trainstack-tb-2/tensorboard/")
    output = first["OutputDataConfig"]["S3OutputPath"]
    assert first["TensorBoardOutputConfig"]["S3OutputPath"].startswith(output)


def test_the_model_is_uploaded_uncompressed(settings):
    """CompressionType NONE (botocore's model: GZIP | NONE, default GZIP): SageMaker uploads the model dir's
    files as they are instead of gzipping a model.tar.gz while every instance is billed."""
    for profile in settings.profiles:
        assert build(profile)["OutputDataConfig"] == {
            "CompressionType": "NONE",
            "S3OutputPath": f"s3://trainstack-artifacts/{RUNS['plain'].run_name}/",
        }


def test_a_profile_with_an_mlflow_tracking_server_names_it_to_the_job(settings):
    server = "arn:aws:sagemaker:us-east-1:111111111111:mlflow-tracking-server/team-tracking"
    profile = settings.profile("llama-1b-smddp").model_copy(update={"mlflow_tracking_server_arn": server})
    request = build(profile)
    assert {
        key: request["Environment"][key] for key in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME")
    } == {
        "MLFLOW_TRACKING_URI": server,
        "MLFLOW_EXPERIMENT_NAME": "llama-1b-smddp",
    }
    assert problems("CreateTrainingJob", request) == []
    assert "MLFLOW_TRACKING_URI" not in build(settings.profile("llama-1b-smddp"))["Environment"]


def test_an_mlflow_tracking_server_that_is_no_arn_is_refused_in_one_sentence(make_settings):
    with pytest.raises(ConfigError, match="a SageMaker managed MLflow tracking server ARN"):
        make_settings(
            {
                "profiles": [
                    {
                        **default_config_data()["profiles"][0],
                        "mlflow_tracking_server_arn": "http://mlflow:5000",
                    }
                ]
            }
        )


RUN_DATA_KEY = "arn:aws:kms:us-east-1:111111111111:key/0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
KEYED_RESOURCES = dataclasses.replace(FSX_RESOURCES, kms_key_arn=RUN_DATA_KEY)


def test_with_the_run_data_key_output_and_volume_are_encrypted_with_it():
    """A type without instance store volumes (m5) takes both keys; the request still matches botocore."""
    profile = custom(instance_preferences=[{"instance_type": "ml.m5.xlarge"}])
    request = build(profile, RUNS["overrides"], resources=KEYED_RESOURCES)
    assert problems("CreateTrainingJob", request) == []
    assert request["OutputDataConfig"]["KmsKeyId"] == RUN_DATA_KEY
    assert request["ResourceConfig"]["VolumeKmsKeyId"] == RUN_DATA_KEY


@pytest.mark.parametrize(
    "types", [["ml.p5.48xlarge"], ["ml.m5.xlarge", "ml.g5.12xlarge"]], ids=["nvme", "one-of-them-nvme"]
)
def test_no_volume_key_where_a_preferred_type_has_instance_store_volumes(types):
    """SageMaker refuses VolumeKmsKeyId on instance types with local NVMe storage (botocore's sagemaker
    model), and the request cannot know which preference SageMaker picks: the output key alone."""
    profile = custom(instance_preferences=[{"instance_type": name} for name in types])
    request = build(profile, resources=KEYED_RESOURCES)
    assert problems("CreateTrainingJob", request) == []
    assert request["OutputDataConfig"]["KmsKeyId"] == RUN_DATA_KEY
    assert "VolumeKmsKeyId" not in request["ResourceConfig"]


def test_without_a_key_the_request_names_none(settings):
    for profile in settings.profiles:
        request = build(profile)
        assert "KmsKeyId" not in request["OutputDataConfig"]
        assert "VolumeKmsKeyId" not in request["ResourceConfig"]
        assert "EnableInterContainerTrafficEncryption" not in request


def test_inter_container_traffic_encryption_reaches_the_request():
    request = build(custom(inter_container_traffic_encryption=True))
    assert problems("CreateTrainingJob", request) == []
    assert request["EnableInterContainerTrafficEncryption"] is True
