"""The SageMaker execution role of a pipeline's training jobs: what a job may read and write (the dataset,
the runs' checkpoints and artifacts, with teams the team's prefixes only), the image it pulls, its logs and
metrics, and the network interfaces of its VPC placement."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam

from stacks.image.image_stack import ImageStack
from stacks.network.network_stack import NetworkStack
from stacks.pipeline.code_access import grant_team_code_reads
from stacks.pipeline.monitoring import TRAINING_METRICS_NAMESPACE
from stacks.pipeline.queue.training_queue import TrainingQueue
from stacks.storage.storage_stack import StorageStack
from stacks.validation import acknowledge
from stacks.wildcard_acknowledgments import acknowledge_wildcard_statements
from trainstack.pipeline_runs import PipelineRuns
from trainstack.queue_settings import BATCH_TRAINING_JOB_PREFIX, queue_job_prefix
from trainstack.runs import TRAINING_LOG_GROUP


def training_job_role(
    stack: cdk.Stack,
    project: str,
    *,
    network: NetworkStack,
    storage: StorageStack,
    image: ImageStack,
    dataset_prefix: str,
    queue: TrainingQueue | None,
) -> iam.Role:
    """What a training job may do: read the dataset, read/write checkpoints and artifacts, pull the
    image, write its logs and metrics, and manage the ENIs of its VPC placement."""
    role = iam.Role(
        stack,
        "SageMakerExecutionRole",
        assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
        description=f"{project} training jobs: their buckets, image, logs and VPC network interfaces",
    )
    _grant_data(role, project, storage, dataset_prefix)
    grant_team_code_reads(role, project, storage)
    if image.repository is not None:
        image.repository.grant_pull(role)
    else:
        role.add_to_policy(iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]))
    _log_and_metric_permissions(stack, role, project, queue)
    _vpc_permissions(stack, role, network)
    _acknowledge_role(role, project)
    return role


def _log_and_metric_permissions(
    stack: cdk.Stack, role: iam.Role, project: str, queue: TrainingQueue | None
) -> None:
    """The job's log streams in SageMaker's fixed group, and its metrics in their namespace."""
    log_group_arn = stack.format_arn(
        service="logs",
        resource="log-group",
        resource_name=TRAINING_LOG_GROUP,
        arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
    )
    role.add_to_policy(
        iam.PolicyStatement(
            sid="TrainingLogs",
            actions=["logs:CreateLogGroup", "logs:DescribeLogStreams"],
            resources=[log_group_arn, f"{log_group_arn}:*"],
        )
    )
    job_name_prefixes = [f"{project}-"]
    if queue is not None:
        job_name_prefixes.append(BATCH_TRAINING_JOB_PREFIX + queue_job_prefix(queue.queue_name))
    role.add_to_policy(
        iam.PolicyStatement(
            sid="TrainingLogStreams",
            actions=["logs:CreateLogStream", "logs:PutLogEvents"],
            # Streams are named <job name>/algo-<n>-<id>; in queue mode Batch names the jobs
            # AWSBatch<jobName>..., our jobNames starting with the queue's key (trainstack.queue_settings)
            # (log streams carry no tags, so only the name narrows them; only this role's jobs write).
            resources=[f"{log_group_arn}:log-stream:{prefix}*" for prefix in job_name_prefixes],
        )
    )
    role.add_to_policy(
        iam.PolicyStatement(
            sid="TrainingMetrics",
            actions=["cloudwatch:PutMetricData"],
            resources=["*"],
            conditions={"StringEquals": {"cloudwatch:namespace": TRAINING_METRICS_NAMESPACE}},
        )
    )


def _vpc_permissions(stack: cdk.Stack, role: iam.Role, network: NetworkStack) -> None:
    """ENI actions SageMaker performs for jobs with VpcConfig, scoped to the training VPC."""
    vpc_arn = stack.format_arn(service="ec2", resource="vpc", resource_name=network.vpc.vpc_id)
    any_interface = stack.format_arn(service="ec2", resource="network-interface", resource_name="*")
    role.add_to_policy(
        iam.PolicyStatement(
            sid="DescribeNetwork",
            actions=[
                "ec2:DescribeNetworkInterfaces",
                "ec2:DescribeVpcs",
                "ec2:DescribeDhcpOptions",
                "ec2:DescribeSubnets",
                "ec2:DescribeSecurityGroups",
            ],
            resources=["*"],
        )
    )
    role.add_to_policy(
        iam.PolicyStatement(
            sid="CreateInterfacesInTrainingSubnets",
            actions=["ec2:CreateNetworkInterface"],
            resources=[
                *(
                    stack.format_arn(service="ec2", resource="subnet", resource_name=subnet.subnet_id)
                    for subnet in network.training_subnets
                ),
                stack.format_arn(
                    service="ec2",
                    resource="security-group",
                    resource_name=network.training_security_group.security_group_id,
                ),
            ],
        )
    )
    role.add_to_policy(
        iam.PolicyStatement(
            sid="ManageInterfacesInTrainingVpc",
            actions=[
                "ec2:CreateNetworkInterface",
                "ec2:CreateNetworkInterfacePermission",
                "ec2:DeleteNetworkInterface",
                "ec2:DeleteNetworkInterfacePermission",
            ],
            resources=[any_interface],
            conditions={"ArnEquals": {"ec2:Vpc": vpc_arn}},
        )
    )


def grant_inherited_runs(role: iam.Role, storage: StorageStack, runs: PipelineRuns) -> None:
    """teams[].inherits_single_team_runs: read the pre-teams runs (`<project>-*`: resumeFrom, init_from),
    never the other teams' runs within that prefix (an explicit deny wins over any allow)."""
    if not runs.inherited:
        return
    buckets = (storage.checkpoint_bucket, storage.artifact_bucket)
    for sid, effect, prefixes in (
        ("InheritedRuns", iam.Effect.ALLOW, runs.inherited_prefixes),
        ("OtherTeamsRuns", iam.Effect.DENY, runs.foreign_prefixes),
    ):
        if not prefixes:
            continue  # the only team: no other team's runs to deny
        role.add_to_policy(
            iam.PolicyStatement(
                sid=f"List{sid}",
                effect=effect,
                actions=["s3:ListBucket"],
                resources=[bucket.bucket_arn for bucket in buckets],
                conditions={"StringLike": {"s3:prefix": [f"{prefix}*" for prefix in prefixes]}},
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid=f"Read{sid}",
                effect=effect,
                actions=["s3:GetObject"],
                resources=[bucket.arn_for_objects(f"{prefix}*") for bucket in buckets for prefix in prefixes],
            )
        )
    acknowledge_wildcard_statements(
        role,
        {
            "ReadInheritedRuns": f"Pre-teams runs are named {runs.inherited}-<run>, chosen per execution; "
            "the other teams' runs within that prefix are denied."
        },
    )


def _grant_data(role: iam.Role, project: str, storage: StorageStack, dataset_prefix: str) -> None:
    """Read the dataset under `dataset_prefix`; read and write the runs' checkpoints and artifacts (and their
    keys): with teams, the team's own prefixes only."""
    dataset = storage.dataset_bucket
    role.add_to_policy(
        iam.PolicyStatement(
            sid="ListDataset",
            actions=["s3:ListBucket"],
            resources=[dataset.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [f"{dataset_prefix}*"]}},
        )
    )
    role.add_to_policy(
        iam.PolicyStatement(
            sid="ReadDataset",
            actions=["s3:GetObject"],
            resources=[dataset.arn_for_objects(f"{dataset_prefix}*")],
        )
    )
    # Checkpoints sync both ways (resume, save); resumeFrom may point at checkpoints or artifacts.
    run_buckets = (storage.checkpoint_bucket, storage.artifact_bucket)
    role.add_to_policy(
        iam.PolicyStatement(
            sid="ListRunBuckets",
            actions=["s3:ListBucket"],
            resources=[bucket.bucket_arn for bucket in run_buckets],
            conditions={"StringLike": {"s3:prefix": [f"{project}-*"]}},
        )
    )
    role.add_to_policy(
        iam.PolicyStatement(
            sid="ReadWriteRuns",
            actions=["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
            resources=[bucket.arn_for_objects(f"{project}-*") for bucket in run_buckets],
        )
    )
    if (express := storage.express_checkpoints.bucket_arn(project)) is not None:
        # s3-express: a session on the team's own directory bucket authorizes every object call in it
        # (s3torchconnector's CRT client creates ReadWrite sessions); CreateSession has no narrower resource.
        role.add_to_policy(
            iam.PolicyStatement(
                sid="ExpressCheckpoints", actions=["s3express:CreateSession"], resources=[express]
            )
        )
    if storage.encryption_key is not None:
        # SSE-KMS reads and writes (multipart uploads decrypt too): no wildcard actions.
        storage.encryption_key.grant(role, "kms:Decrypt", "kms:GenerateDataKey")
    if storage.dataset_key is not None:
        storage.dataset_key.grant_decrypt(role)  # an existing SSE-KMS dataset bucket


def _acknowledge_role(role: iam.Role, project: str) -> None:
    acknowledge(
        role,
        "AwsSolutions-IAM5[Resource::*]",
        "ecr:GetAuthorizationToken, cloudwatch:PutMetricData (limited by the namespace condition) and "
        "the EC2 Describe* calls SageMaker makes for VPC placement support no resource-level "
        "permissions.",
    )
    acknowledge_wildcard_statements(
        role,
        {
            "ReadDataset": "Training reads every object under the configured dataset prefix.",
            "ReadWriteRuns": f"Runs own s3://<bucket>/<runName>/ and run names start with {project}-; "
            "the run names are chosen per execution.",
            "TrainingLogs": f"SageMaker writes job logs as streams of its fixed group {TRAINING_LOG_GROUP}.",
            "TrainingLogStreams": f"Streams are named after the job; job names start with {project}-.",
            "ManageInterfacesInTrainingVpc": "SageMaker creates the job's network interfaces at run "
            "time; "
            "the ec2:Vpc condition limits them to the training VPC.",
        },
    )
