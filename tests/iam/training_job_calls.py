"""What a training job does with the SageMaker execution role, for one CreateTrainingJob request: its
dataset, checkpoints, artifacts and TensorBoard output in S3 (through the buckets' KMS key, if any), the
image pull, its logs and metrics, and the network interfaces of its VPC placement. SageMaker's developer
guide, "How to use SageMaker AI execution roles" (CreateTrainingJob permissions) and "Give SageMaker AI
Training Jobs Access to Resources in Your Amazon VPC"."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

from tests.iam.mlflow_recording import recorded_actions
from training_scripts.checkpoint_layout import folder_name
from training_scripts.mlflow_log import MLFLOW_TRACKING_URI_ENV
from trainstack.checkpoint_requests import RESUME_FROM_HYPERPARAMETER
from trainstack.job_request import PipelineResources, RunRequest, build_create_training_job_request

# SageMaker's log group and metric namespace for training jobs (fixed by SageMaker).
TRAINING_LOG_GROUP = "/aws/sagemaker/TrainingJobs"
# The describe calls SageMaker makes for a VPC job (the VPC page of the module docstring).
VPC_DESCRIBE_ACTIONS = (
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeVpcs",
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeSubnets",
    "ec2:DescribeSecurityGroups",
)
ECR_PULL_ACTIONS = ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability")
SECURE = {"aws:SecureTransport": "true"}
Authorization = tuple[str, str, dict[str, Any]]  # (action, resource, context)
DIRECTORY_BUCKET = "AWS::S3Express::DirectoryBucket"


def is_directory_bucket_uri(uri: str) -> bool:
    """An s3:// location in a directory bucket (S3 user guide, "Directory bucket naming rules")."""
    return uri.startswith("s3://") and _bucket_and_prefix(uri)[0].endswith("--x-s3")


class TrainingJobCalls:
    """A mixin of CallCatalog: it reads the catalog's app, settings, names and `arn()`."""

    def resources(self) -> PipelineResources:
        """The deployed values the pipeline's requests carry, read from its definition's substitutions."""
        [(stack, logical_id, properties)] = [
            entry
            for entry in self.app.resources_of_type("AWS::StepFunctions::StateMachine")
            if entry[2].get("StateMachineName") == self.pipeline_name
        ]
        values = properties["DefinitionSubstitutions"]
        return PipelineResources(
            role_arn=values["SageMakerRoleArn"],
            image_uri=values["TrainingImageUri"],
            job_name_prefix=f"{self.project}-",
            checkpoint_bucket=values["CheckpointBucket"],
            artifact_bucket=values["ArtifactBucket"],
            dataset_bucket=values["DatasetBucket"],
            dataset_prefix=self.settings.dataset.prefix,
            subnet_ids=tuple(values[name] for name in sorted(values) if name.startswith("TrainingSubnet")),
            security_group_ids=tuple(
                values[name] for name in sorted(values) if name.startswith("TrainingSecurityGroup")
            ),
            file_system_id=values.get("FileSystemId"),
            file_system_directory_path=values.get("FileSystemDirectoryPath"),
            checkpoint_file_system_path=values.get("CheckpointDirectoryPath"),
            kms_key_arn=values.get("RunDataKeyArn"),
            express_checkpoint_bucket=values.get("ExpressCheckpointBucket"),
            region=self.app.region,
        )

    def request(self, profile, resume_from: str | None = None) -> dict[str, Any]:
        run = RunRequest(profile=profile.name, run_name=self.run_name, resume_from=resume_from)
        return build_create_training_job_request(
            profile, self.resources(), run, 1, self._pipeline_execution(), namespace=self.project
        )

    def job_authorizations(self, request: dict[str, Any]) -> Iterator[Authorization]:
        job = self.job_name()
        for channel in request["InputDataConfig"]:
            source = channel["DataSource"].get("S3DataSource")
            if source:  # SageMaker lists the prefix, then downloads every object (File mode)
                yield from self._s3_read(source["S3Uri"], "shard-000.bin")
        yield from self._checkpoint_calls(request)
        output = request["OutputDataConfig"]["S3OutputPath"]
        yield from self._s3_object("s3:PutObject", output, f"{job}/output/model/model.safetensors")
        yield from self._s3_object("s3:PutObject", output, f"{job}/output/output.tar.gz")
        tensorboard = request["TensorBoardOutputConfig"]["S3OutputPath"]
        yield from self._s3_object("s3:PutObject", tensorboard, "events.out.tfevents.1764547200.algo-1")
        registry, _, repository = request["AlgorithmSpecification"]["TrainingImage"].partition("/")
        yield ("ecr:GetAuthorizationToken", "*", {})
        repository_arn = self.arn("ecr", f"repository/{repository.split('@')[0].rsplit(':', 1)[0]}")
        for action in ECR_PULL_ACTIONS:
            yield (action, repository_arn, {})
        group = self.arn("logs", f"log-group:{TRAINING_LOG_GROUP}")
        stream = f"{group}:log-stream:{job}/algo-1-1764547200"
        yield ("logs:CreateLogGroup", group, {})
        yield ("logs:DescribeLogStreams", group, {})
        yield ("logs:CreateLogStream", stream, {})
        yield ("logs:PutLogEvents", stream, {})
        yield ("cloudwatch:PutMetricData", "*", {"cloudwatch:namespace": TRAINING_LOG_GROUP})
        yield from self._network_interface_calls(request["VpcConfig"])
        volume_key = request["ResourceConfig"].get("VolumeKmsKeyId")
        if (
            volume_key
        ):  # the ML storage volume's grant for the AWS resource it encrypts (stacks/run_data_key.py)
            yield ("kms:CreateGrant", volume_key, {"kms:GrantIsForAWSResource": "true"})
        server = request.get("Environment", {}).get(MLFLOW_TRACKING_URI_ENV)
        if server:  # the calls training_scripts/mlflow_log.py makes, recorded on the pinned client
            for action in recorded_actions():
                yield (action, server, {})

    def _checkpoint_calls(self, request: dict[str, Any]) -> Iterator[Authorization]:
        """The checkpoints in S3, by SageMaker's sync (CheckpointConfig) or by train.py itself through
        s3torchconnector (HyperParameters checkpoint_dir, resume_from: training_scripts/checkpoint_storage).
        Both list the run's prefix, read (GetObject; HeadObject is authorized as GetObject), write (PutObject;
        a multipart upload's Create/UploadPart/Complete are PutObject too), abort a multipart upload, and
        delete what keep_checkpoints prunes; train.py also lists one folder to prune it (Service
        Authorization Reference, Amazon S3; S3 user guide, "Multipart upload API and permissions")."""
        hyperparameters = request["HyperParameters"]
        location = request.get("CheckpointConfig", {}).get("S3Uri", hyperparameters.get("checkpoint_dir"))
        shard = f"{folder_name(100)}/__0_0.distcp"
        if is_directory_bucket_uri(location):  # s3-express: one session authorizes every object call
            yield from self._express_session(location)
        elif location.startswith("s3://"):  # fsx: the file system's directory, no S3 call
            yield from self._s3_read(location, shard)
            for action in ("s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"):
                yield from self._s3_object(action, location, shard)
            if "CheckpointConfig" not in request:
                yield from self._s3_list(f"{location}{folder_name(100)}/")
        resume = hyperparameters.get(RESUME_FROM_HYPERPARAMETER)
        if resume and is_directory_bucket_uri(resume):
            yield from self._express_session(resume)
        elif resume:  # read directly, each rank its own shards: list, marker, .metadata, shards
            yield from self._s3_read(resume, shard)

    def _network_interface_calls(self, vpc_config) -> Iterator[Authorization]:
        vpc = self.arn("ec2", f"vpc/{self.vpc_id()}")
        interface = self.arn("ec2", "network-interface/eni-0123456789abcdef0")
        for action in VPC_DESCRIBE_ACTIONS:
            yield (action, "*", {})
        for subnet in vpc_config["Subnets"]:
            yield ("ec2:CreateNetworkInterface", self.arn("ec2", f"subnet/{subnet}"), {"ec2:Vpc": vpc})
        for group in vpc_config["SecurityGroupIds"]:
            yield ("ec2:CreateNetworkInterface", self.arn("ec2", f"security-group/{group}"), {"ec2:Vpc": vpc})
        for action in (
            "ec2:CreateNetworkInterface",
            "ec2:CreateNetworkInterfacePermission",
            "ec2:DeleteNetworkInterface",
            "ec2:DeleteNetworkInterfacePermission",
        ):
            yield (
                action,
                interface,
                {"ec2:Vpc": vpc, "ec2:Subnet": self.arn("ec2", f"subnet/{vpc_config['Subnets'][0]}")},
            )

    def vpc_id(self) -> str:
        existing = self.settings.network.existing
        if existing is not None:
            return existing.vpc_id
        [(stack, logical_id, _)] = self.app.resources_of_type("AWS::EC2::VPC")
        return self.app.resolve({"Ref": logical_id}, stack)

    def _s3_read(self, uri: str, key: str) -> Iterator[Authorization]:
        yield from self._s3_list(uri)
        yield from self._s3_object("s3:GetObject", uri, key)

    def _s3_list(self, uri: str) -> Iterator[Authorization]:
        bucket, prefix = _bucket_and_prefix(uri)
        yield ("s3:ListBucket", f"arn:aws:s3:::{bucket}", {**SECURE, "s3:prefix": prefix})

    def _s3_object(self, action: str, uri: str, key: str) -> Iterator[Authorization]:
        bucket, prefix = _bucket_and_prefix(uri)
        yield (action, f"arn:aws:s3:::{bucket}/{prefix}{key}", SECURE)
        key_arn = self.bucket_key(bucket)
        if key_arn is not None:  # SSE-KMS: S3 uses the key on the caller's behalf
            via = {"kms:ViaService": f"s3.{self.app.region}.amazonaws.com"}
            kms_actions = (
                ("kms:Decrypt",) if action == "s3:GetObject" else ("kms:GenerateDataKey", "kms:Decrypt")
            )
            for kms_action in kms_actions:
                yield (kms_action, key_arn, via)

    def _express_session(self, uri: str) -> Iterator[Authorization]:
        """s3-express: the connector's CRT client opens a ReadWrite session on the directory bucket, which
        authorizes its object calls; under SSE-KMS S3 uses the bucket's key for the session's objects (S3
        user guide, "Using server-side encryption with AWS KMS keys (SSE-KMS) in directory buckets"; the
        ViaService value s3express.<region> is assumed)."""
        bucket, _ = _bucket_and_prefix(uri)
        arn = self.arn("s3express", f"bucket/{bucket}")
        yield ("s3express:CreateSession", arn, {**SECURE, "s3express:SessionMode": "ReadWrite"})
        key_arn = self.bucket_key(bucket, DIRECTORY_BUCKET)
        if key_arn is not None:
            via = {"kms:ViaService": f"s3express.{self.app.region}.amazonaws.com"}
            for kms_action in ("kms:GenerateDataKey", "kms:Decrypt"):
                yield (kms_action, key_arn, via)

    def bucket_key(self, bucket: str, kind: str = "AWS::S3::Bucket") -> str | None:
        for stack, logical_id, properties in self.app.resources_of_type(kind):
            if self.app.resolve({"Ref": logical_id}, stack) != bucket:
                continue
            for rule in properties.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration", []):
                key = rule["ServerSideEncryptionByDefault"].get("KMSMasterKeyID")
                if key:
                    return key
        return None

    def resource_policy(self, resource: str) -> dict[str, Any] | None:
        if resource.startswith("arn:aws:s3:::"):
            return self.app.bucket_policies.get(resource.removeprefix("arn:aws:s3:::").split("/")[0])
        return self.app.key_policies.get(resource)


def _bucket_and_prefix(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    return parsed.netloc, parsed.path.lstrip("/")
