"""The CreateTrainingJob request of one attempt of one run: the contract with the state machine.

`build_create_training_job_request(profile, resources, run, attempt, execution_arn)` returns the
complete request. It is `base_request(profile, resources)` (fixed per profile at synth) with the
per-run fields below applied; the state machine builds the same request from the same parts:
the base request is embedded per profile in the definition, and each execution fills in:

  field                                   value                                  when
  TrainingJobName                         job_name(runName, attempt)             always
  TensorBoardOutputConfig.S3OutputPath    tensorboard_uri(resources, runName,    always
                                          job name)
  OutputDataConfig.S3OutputPath           output_path(resources, runName)        always
  CheckpointConfig.S3Uri                  checkpoint_uri(profile, resources,     checkpoint_store
                                          runName)                               sagemaker-sync
  HyperParameters.checkpoint_dir          checkpoint_uri(profile, resources,     any other store
                                          runName)
  Tags                                    tags(runName, executionArn, namespace) always
  HyperParameters                         base HyperParameters merged with the   hyperparameters given
                                          input's (input wins; reserved names
                                          are rejected by input validation)
  ResourceConfig.InstancePreferences      instance_preferences(profile,          instanceCount given
                                          counted=False) (not on spot profiles)
  ResourceConfig.InstanceCount            instanceCount                          instanceCount given
  StoppingCondition.MaxRuntimeInSeconds   max_runtime_seconds(maxRuntimeHours)   maxRuntimeHours given
  InputDataConfig (appended)              resume_channel(resumeFrom)             resumeFrom given, not
                                                                                 read directly
  HyperParameters.resume_from             resumeFrom                             resumeFrom read directly
                                                                                 (resumes_directly)
  HyperParameters.sagemaker_submit_       team_code.code_hyperparameters(        code given
  directory, .sagemaker_program           code_uri(digest), entry)

Choices made here:
- The run name prefixes everything a run owns: jobs `<runName>-<attempt>` (IAM scopes
  `training-job/<project>-*`, so run names start with `<project>-`), artifacts
  `s3://<artifacts>/<runName>/`, checkpoints `s3://<checkpoints>/<runName>/`. The checkpoint URI is
  the same for every attempt, so attempt N+1 resumes where attempt N stopped; re-using a run name
  resumes that run.
- Instance counts: without an override each preference carries its own InstanceCount; with one,
  ResourceConfig.InstanceCount applies to every preference (SageMaker accepts one form or the other).
  Managed spot excludes InstancePreferences, so spot profiles name one InstanceType/InstanceCount;
  the chosen type is then ResourceConfig.InstanceType instead of SelectedInstanceType.
- Hyperparameters: launch flags are JSON-encoded as the SageMaker Python SDK does (json.dumps of
  each value: "true", "\"train.py\"", '{"tensor_parallel_degree": 8}'); profile defaults and
  execution values are strings passed unchanged (the toolkit json-decodes those that parse, so
  "3e-4" reaches train.py as 0.0003 and "abc" as abc). Launch flags cannot be overridden.
- Checkpoint stores and resumeFrom: trainstack.checkpoint_requests.
- Model output uncompressed (OutputDataConfig.CompressionType NONE, AWS's recommendation for large
  models): SageMaker uploads the files of /opt/ml/model as they are under
  `<S3OutputPath><job>/output/model/` instead of gzipping a model.tar.gz while every instance is still
  billed; the bf16 safetensors would hardly compress anyway.
- Encryption (`encryption:` in the config, trainstack/encryption_settings.py): with a key, the job's
  output (OutputDataConfig.KmsKeyId) is encrypted with it, and so is its ML storage volume
  (ResourceConfig.VolumeKmsKeyId) when no preferred type has instance store volumes: SageMaker refuses a
  VolumeKmsKeyId on those and encrypts their NVMe volumes with the instance's own hardware module
  (botocore's sagemaker model). `inter_container_traffic_encryption` (a profile's) sets
  EnableInterContainerTrafficEncryption.
- Environment PET_MAX_RESTARTS (torchrun and smp profiles): torchrun's restarts inside the job, from
  the profile's in_job_restarts (trainstack/in_job_restarts.py).
- Environment AWS_REGION (s3-express profiles): the Region s3torchconnector signs for and whose zonal
  endpoint serves the directory bucket.
- Environment TRAINSTACK_EXPECTED_GPUS: GPUs per instance from the catalog, which the container's
  preflight compares with the GPUs it sees. Set only when every preferred type has the same number
  (the request cannot know which type SageMaker will pick); otherwise the preflight skips the check.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from training_scripts.metrics import METRIC_DEFINITIONS
from training_scripts.mlflow_log import MLFLOW_EXPERIMENT_ENV, MLFLOW_TRACKING_URI_ENV
from trainstack.checkpoint_requests import (
    CHECKPOINT_LOCAL_PATH,
    REGION_ENV,
    RESUME_FROM_HYPERPARAMETER,
    checkpoint_channel,
    checkpoint_uri,
    express_region,
    file_system_channel,
    resume_channel,
    resumes_directly,
    syncs_checkpoints,
)
from trainstack.in_job_restarts import in_job_restart_environment
from trainstack.launch_flags import EXPECTED_GPUS_ENV, MPIRUN_STOP_OPTIONS
from trainstack.planning.auto_interval import resolved_hyperparameters
from trainstack.profiles import Profile
from trainstack.team_code import CodeRef, code_hyperparameters, code_prefix, code_uri

TRAIN_CHANNEL = "train"
EXECUTION_TAG = "trainstack:execution"
RUN_TAG = "trainstack:run"
# The pipeline's project (config `project`): the sweepers stop only jobs of their own namespace, whatever
# another pipeline in the account tags its jobs with. SageMaker tag values allow letters, digits, spaces
# and `_.:/=+-@` (DESIGN.md Facts): a project name (letters, digits, hyphens) always fits.
NAMESPACE_TAG = "trainstack:namespace"
# SageMaker retries a job itself only after an InternalServerError; capacity is the state machine's job.
INTERNAL_ERROR_RETRIES = 2


@dataclass(frozen=True)
class PipelineResources:
    """Deploy-time values the requests refer to; at synth these may be CDK token strings."""

    role_arn: str
    image_uri: str
    job_name_prefix: str
    checkpoint_bucket: str
    artifact_bucket: str
    dataset_bucket: str
    dataset_prefix: str
    subnet_ids: tuple[str, ...]
    security_group_ids: tuple[str, ...]
    # FSx for Lustre holding the dataset; None reads the dataset bucket/prefix over S3 instead.
    file_system_id: str | None = None
    # "/<mountName>/<path>" of the dataset on the file system.
    file_system_directory_path: str | None = None
    # The customer managed KMS key of the runs' output and volumes; None: AWS's keys (encryption: off).
    kms_key_arn: str | None = None
    # The s3-express store's directory bucket; None: no profile uses it.
    express_checkpoint_bucket: str | None = None
    # The deployment's Region, which s3torchconnector's client needs for a directory bucket's zonal
    # endpoint (s3express-<zone id>.<region>.amazonaws.com); None: no profile uses s3-express.
    region: str | None = None
    # "/<mountName>/<path>" of the fsx store's checkpoint directory (the team's) on the file system.
    checkpoint_file_system_path: str | None = None


@dataclass(frozen=True)
class RunRequest:
    """One execution's input, validated (see trainstack.execution_input)."""

    profile: str
    run_name: str
    hyperparameters: Mapping[str, str] = field(default_factory=dict)
    instance_count: int | None = None
    max_runtime_hours: float | None = None
    resume_from: str | None = None
    # Queue mode: Batch's schedulingPriority and shareIdentifier (None: not sent).
    priority: int | None = None
    share: str | None = None
    # The team's own code (trainstack.team_code); None: the image's entry point.
    code: CodeRef | None = None


def job_name(run_name: str, attempt: int) -> str:
    return f"{run_name}-{attempt}"


def output_path(resources: PipelineResources, run_name: str) -> str:
    return f"s3://{resources.artifact_bucket}/{run_name}/"


def team_code_prefix(resources: PipelineResources) -> str:
    """The pipeline's team's code prefix (team_code.code_prefix of its namespace)."""
    return code_prefix(resources.artifact_bucket, resources.job_name_prefix.removesuffix("-"))


def code_location(resources: PipelineResources, digest: str) -> str:
    """Where the pipeline's team keeps the bundle `digest` (team_code.code_uri of its namespace)."""
    return code_uri(resources.artifact_bucket, resources.job_name_prefix.removesuffix("-"), digest)


def tensorboard_uri(resources: PipelineResources, run_name: str, job_name: str) -> str:
    """Where SageMaker uploads what the job writes under its TensorBoard directory: beside the job's own
    output (`<output_path>/<job name>/output/`), one prefix per job, so the runs of a TensorBoard
    `--logdir s3://<artifacts>/<runName>/` are the run's attempts."""
    return f"{output_path(resources, run_name)}{job_name}/tensorboard/"


def max_runtime_seconds(hours: float) -> int:
    """Hours to whole seconds, rounded half to even as JSONata's $round does in the state machine."""
    return round(hours * 3600)


def tags(run_name: str, execution_arn: str | None, namespace: str | None = None) -> list[dict[str, str]]:
    """The run's tags; a pipeline execution's jobs also name the execution and the pipeline's namespace."""
    run_tags = [{"Key": RUN_TAG, "Value": run_name}]
    if execution_arn:
        run_tags.insert(0, {"Key": EXECUTION_TAG, "Value": execution_arn})
    if namespace:
        run_tags.append({"Key": NAMESPACE_TAG, "Value": namespace})
    return run_tags


def instance_preferences(profile: Profile, *, counted: bool = True) -> list[dict[str, Any]]:
    """ResourceConfig.InstancePreferences; counted=False leaves the count to ResourceConfig.InstanceCount.
    A training plan reserves one instance type, so it goes on that type's preference (TrainingPlanArns),
    never job-level beside other types."""
    preferences = []
    for preference, plan in zip(profile.instance_preferences, profile.training_plan_arns, strict=True):
        entry: dict[str, Any] = {"InstanceType": preference.instance_type}
        if counted:
            entry["InstanceCount"] = preference.instance_count
        if plan:
            entry["TrainingPlanArns"] = [plan]
        preferences.append(entry)
    return preferences


def encode_hyperparameters(values: Mapping[str, Any]) -> dict[str, str]:
    """JSON-encode each value, as the SageMaker Python SDK does for framework estimators."""
    return {name: json.dumps(value) for name, value in values.items()}


def base_request(profile: Profile, resources: PipelineResources) -> dict[str, Any]:
    """Everything in the request that is fixed per profile; per-run fields (module docstring) are absent."""
    request: dict[str, Any] = {
        "RoleArn": resources.role_arn,
        "AlgorithmSpecification": {
            "TrainingImage": resources.image_uri,
            "TrainingInputMode": "File",
            "MetricDefinitions": [dict(definition) for definition in METRIC_DEFINITIONS],
        },
        "HyperParameters": {
            **resolved_hyperparameters(profile),  # checkpoint_interval: auto as a number of steps
            **encode_hyperparameters(launch_hyperparameters(profile)),
        },
        "InputDataConfig": [_train_channel(resources)],
        "OutputDataConfig": {"CompressionType": "NONE"},
        **({"CheckpointConfig": {"LocalPath": CHECKPOINT_LOCAL_PATH}} if syncs_checkpoints(profile) else {}),
        "ResourceConfig": _resource_config(profile, resources.kms_key_arn),
        "VpcConfig": {
            "SecurityGroupIds": list(resources.security_group_ids),
            "Subnets": list(resources.subnet_ids),
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": max_runtime_seconds(profile.max_runtime_hours)},
        "RetryStrategy": {"MaximumRetryAttempts": INTERNAL_ERROR_RETRIES},
        "InfraCheckConfig": {"EnableInfraCheck": profile.infra_check},
        "Environment": _environment(profile),
    }
    if profile.checkpoint_store == "fsx":
        request["InputDataConfig"].append(checkpoint_channel(resources))
        request["HyperParameters"]["checkpoint_dir_shared"] = "true"
    if profile.checkpoint_store == "s3-express":
        # SageMaker's own variables name no Region for certain (the toolkit reads a `sagemaker_region`
        # hyperparameter, which only the Python SDK sends): the request says it.
        request["Environment"][REGION_ENV] = express_region(resources)
    if resources.kms_key_arn is not None:
        request["OutputDataConfig"]["KmsKeyId"] = resources.kms_key_arn
    if profile.inter_container_traffic_encryption:
        request["EnableInterContainerTrafficEncryption"] = True
    if profile.managed_spot:
        request["EnableManagedSpotTraining"] = True
        request["StoppingCondition"]["MaxWaitTimeInSeconds"] = max_runtime_seconds(profile.max_wait_hours)
    return request


def build_create_training_job_request(
    profile: Profile,
    resources: PipelineResources,
    run: RunRequest,
    attempt: int,
    execution_arn: str | None = None,
    namespace: str | None = None,
) -> dict[str, Any]:
    """The complete CreateTrainingJob request of attempt `attempt` (1-based) of `run`; `namespace`: the
    pipeline's project, as its executions tag their jobs."""
    request = copy.deepcopy(base_request(profile, resources))
    request["TrainingJobName"] = job_name(run.run_name, attempt)
    # LocalPath is left to SageMaker's default, /opt/ml/output/tensorboard (botocore's sagemaker model),
    # where train.py writes: CreateTrainingJob has rejected an explicit LocalPath under /opt/ml
    # (aws/amazon-sagemaker-examples#3620).
    request["TensorBoardOutputConfig"] = {
        "S3OutputPath": tensorboard_uri(resources, run.run_name, request["TrainingJobName"])
    }
    request["OutputDataConfig"]["S3OutputPath"] = output_path(resources, run.run_name)
    request["Tags"] = tags(run.run_name, execution_arn, namespace)
    if syncs_checkpoints(profile):
        request["CheckpointConfig"]["S3Uri"] = checkpoint_uri(profile, resources, run.run_name)
    else:
        request["HyperParameters"]["checkpoint_dir"] = checkpoint_uri(profile, resources, run.run_name)
    request["HyperParameters"].update(run.hyperparameters)
    if run.instance_count is not None:
        resource_config = request["ResourceConfig"]
        if profile.uses_instance_preferences:
            resource_config["InstancePreferences"] = instance_preferences(profile, counted=False)
        resource_config["InstanceCount"] = run.instance_count
    if run.max_runtime_hours is not None:
        request["StoppingCondition"]["MaxRuntimeInSeconds"] = max_runtime_seconds(run.max_runtime_hours)
    if run.resume_from is not None and resumes_directly(profile, resources, run.resume_from):
        request["HyperParameters"][RESUME_FROM_HYPERPARAMETER] = run.resume_from
    elif run.resume_from is not None:
        request["InputDataConfig"].append(resume_channel(run.resume_from))
    if run.code is not None:
        uri = code_location(resources, run.code.digest)
        request["HyperParameters"].update(code_hyperparameters(uri, run.code.entry))
    return request


def encrypts_volume(profile: Profile) -> bool:
    """Whether the profile's jobs can take a VolumeKmsKeyId: none of its types has instance store volumes."""
    return not any(preference.spec.instance_store for preference in profile.instance_preferences)


def _resource_config(profile: Profile, kms_key_arn: str | None) -> dict[str, Any]:
    config: dict[str, Any] = {"VolumeSizeInGB": profile.volume_size_gb}
    if kms_key_arn is not None and encrypts_volume(profile):
        config["VolumeKmsKeyId"] = kms_key_arn
    if profile.uses_instance_preferences:
        config["InstancePreferences"] = instance_preferences(profile)
    else:
        only = profile.instance_preferences[0]
        config["InstanceType"] = only.instance_type
        config["InstanceCount"] = only.instance_count
    if profile.keep_alive_seconds:
        config["KeepAlivePeriodInSeconds"] = profile.keep_alive_seconds
    return config


def _environment(profile: Profile) -> dict[str, str]:
    environment = dict(profile.environment)
    if profile.mlflow_tracking_server_arn:
        # MLflow's own variables: the sagemaker-mlflow plugin resolves a tracking-server ARN as the URI.
        environment[MLFLOW_TRACKING_URI_ENV] = profile.mlflow_tracking_server_arn
        environment[MLFLOW_EXPERIMENT_ENV] = profile.mlflow_experiment or profile.name
    environment |= in_job_restart_environment(profile.strategy, profile.in_job_restarts)
    gpu_counts = {preference.spec.gpus for preference in profile.instance_preferences}
    if len(gpu_counts) == 1:
        environment[EXPECTED_GPUS_ENV] = str(gpu_counts.pop())
    return environment


def _train_channel(resources: PipelineResources) -> dict[str, Any]:
    if resources.file_system_id is not None:
        return file_system_channel(
            TRAIN_CHANNEL, resources.file_system_id, resources.file_system_directory_path, "ro"
        )
    return {
        "ChannelName": TRAIN_CHANNEL,
        "DataSource": {
            "S3DataSource": {
                "S3DataType": "S3Prefix",
                "S3Uri": f"s3://{resources.dataset_bucket}/{resources.dataset_prefix}",
                "S3DataDistributionType": "FullyReplicated",
            }
        },
        # Streams the dataset instead of copying all of it to every instance before training starts.
        "InputMode": "FastFile",
    }


def launch_hyperparameters(profile: Profile) -> dict[str, Any]:
    """The SageMaker toolkit's launch flags of `profile` (and train.py's --strategy and slow-host flags),
    before JSON encoding."""
    flags: dict[str, Any] = {"sagemaker_program": profile.entry_point}
    if profile.strategy in ("torchrun", "smp"):
        flags["sagemaker_torch_distributed_enabled"] = True
    if profile.strategy == "smp":  # unset keys keep SMP's defaults
        flags["mp_parameters"] = profile.smp.as_mp_parameters() if profile.smp else {}
    if profile.strategy == "smddp":
        flags["sagemaker_distributed_dataparallel_enabled"] = True
        flags["sagemaker_distributed_dataparallel_custom_mpi_options"] = MPIRUN_STOP_OPTIONS
    if profile.strategy == "mpi":
        flags["sagemaker_mpi_enabled"] = True
        flags["sagemaker_mpi_num_of_processes_per_host"] = profile.processes_per_host
        flags["sagemaker_mpi_custom_mpi_options"] = MPIRUN_STOP_OPTIONS
    else:
        flags["strategy"] = profile.strategy
    if profile.slow_host is not None:
        flags.update(profile.slow_host.hyperparameters())
    return flags
