"""What one pipeline's requests name (trainstack.job_request.PipelineResources) and where its jobs read their
data: the project's dataset prefix and file system, or with teams the team's own directory of them."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_iam as iam

from stacks.image.image_stack import ImageStack
from stacks.network.network_stack import NetworkStack
from stacks.storage.storage_stack import StorageStack
from trainstack.job_request import PipelineResources
from trainstack.teams import Team, team_dataset_prefix


@dataclass(frozen=True)
class TeamDataset:
    """Where a pipeline's jobs read their data: the dataset prefix and FSx directory (with teams, the
    team's)."""

    prefix: str
    file_system_directory_path: str | None
    # The fsx checkpoint store's directory on the file system: /<mount>/checkpoints/<team> (or /all), which
    # the checkpoint association exports to s3://<checkpoints>/fsx-checkpoints/<team>/.
    checkpoint_file_system_path: str | None = None


def team_dataset(storage: StorageStack, team: Team | None) -> TeamDataset:
    """`<dataset prefix><team>/` in S3, which the file system shows as `/<mount>/dataset/<team>` (the dataset
    association maps /dataset to the dataset prefix); without teams, the whole dataset prefix and
    /<mount>/dataset. The checkpoint directory is named from the pipeline's own team, never from input."""
    path, checkpoints = storage.file_system_dataset_path, storage.file_system_checkpoint_path
    checkpoints = None if checkpoints is None else f"{checkpoints}/{team.name if team else 'all'}"
    if team is None:
        return TeamDataset(storage.dataset_prefix, path, checkpoints)
    return TeamDataset(
        team_dataset_prefix(storage.dataset_prefix, team.name),
        None if path is None else f"{path}/{team.name}",
        checkpoints,
    )


def pipeline_resources(
    project: str,
    sagemaker_role: iam.Role,
    network: NetworkStack,
    storage: StorageStack,
    image: ImageStack,
    dataset: TeamDataset,
) -> PipelineResources:
    """What the job requests name: the role, image, buckets, VPC placement and file system."""
    return PipelineResources(
        role_arn=sagemaker_role.role_arn,
        image_uri=image.image_uri,
        job_name_prefix=f"{project}-",
        checkpoint_bucket=storage.checkpoint_bucket.bucket_name,
        artifact_bucket=storage.artifact_bucket.bucket_name,
        dataset_bucket=storage.dataset_bucket.bucket_name,
        dataset_prefix=dataset.prefix,
        subnet_ids=tuple(subnet.subnet_id for subnet in network.training_subnets),
        security_group_ids=(network.training_security_group.security_group_id,),
        file_system_id=storage.file_system_id,
        file_system_directory_path=dataset.file_system_directory_path,
        kms_key_arn=storage.run_data_key.key_arn if storage.run_data_key is not None else None,
        checkpoint_file_system_path=dataset.checkpoint_file_system_path,
        express_checkpoint_bucket=storage.express_checkpoints.bucket_name(project),
        region=storage.region,
    )
