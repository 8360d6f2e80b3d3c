"""The training image: built from container/ by `cdk deploy` and kept in this stack's ECR repository,
or an existing image URI from the config (nothing built, nothing created)."""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
import cdk_ecr_deployment as ecr_deployment
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from stacks.governed_account import (
    LAMBDA_VPC_ACCESS_POLICY,
    LAMBDA_VPC_ACCESS_REASON,
)
from stacks.network.network_stack import NetworkStack
from stacks.validation import acknowledge
from trainstack.config import ImageSettings
from trainstack.registry import code_version

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = "container/Dockerfile"
# The Lambda streams image layers from the CDK assets repository into ours; memory also buys network.
COPY_MEMORY_MIB = 2048


class ImageStack(cdk.Stack):
    """`image_uri` goes into CreateTrainingJob; `repository` lets the pipeline grant its role pull access."""

    image_uri: str
    repository: ecr.IRepository | None

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        project: str,
        image: ImageSettings,
        handlers_network: NetworkStack | None = None,
        keep_repository: bool = False,
        **kwargs,
    ) -> None:
        """`handlers_network`: where the image copy runs, with compliance: control-tower (CT.LAMBDA.PR.3);
        None runs it outside any VPC. `keep_repository` (migrations.keep_image_repository): with `image.uri`,
        the repository built images went to stays (retained and named `<project>-training`, it could not be
        created again once the config builds the image anew)."""
        super().__init__(scope, construct_id, description="trainstack training image (ECR)", **kwargs)
        self._network = handlers_network
        if image.uri:
            self.image_uri = image.uri
            self.repository = _existing_repository(self, image.uri)
            if keep_repository:
                self._repository(project, image)
        else:
            self.repository, self.image_uri = self._build(project, image)
        # Where people and scripts look up the current image (and the stack is never empty).
        ssm.StringParameter(
            self,
            "ImageUriParameter",
            parameter_name=f"/{project}/training-image-uri",
            string_value=self.image_uri,
            description="Image every trainstack training job runs",
        )
        cdk.CfnOutput(self, "ImageUri", value=self.image_uri, description="Image every training job runs")

    def _repository(self, project: str, image: ImageSettings) -> ecr.Repository:
        return ecr.Repository(
            self,
            "Repository",
            repository_name=f"{project}-training",
            image_scan_on_push=True,
            image_tag_mutability=ecr.TagMutability.IMMUTABLE,
            lifecycle_rules=[
                ecr.LifecycleRule(
                    description=f"Keep the {image.keep_images} most recent images",
                    tag_status=ecr.TagStatus.ANY,
                    max_image_count=image.keep_images,
                )
            ],
            # Images are what past jobs ran: keep them (and the repository) when the stack goes.
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )

    def _build(self, project: str, image: ImageSettings) -> tuple[ecr.IRepository, str]:
        repository = self._repository(project, image)
        build_args = {"SMP_REGION": self.region, "TRAINSTACK_CODE_VERSION": code_version()}
        if image.base_digest:
            build_args["SMP_IMAGE_DIGEST"] = image.base_digest
        else:
            cdk.Annotations.of(self).add_warning_v2(
                "trainstack:image-base-digest",
                "image.base_digest is not set, so `cdk deploy` cannot build the image: set it to the digest "
                "of AWS's SMP base image (docs/container.md shows the command).",
            )
        asset = ecr_assets.DockerImageAsset(
            self,
            "TrainingImage",
            directory=str(REPO_ROOT),
            file=DOCKERFILE,
            platform=ecr_assets.Platform.LINUX_AMD64,
            build_args=build_args,
            ignore_mode=cdk.IgnoreMode.DOCKER,
        )
        # The asset lands in the CDK bootstrap repository; the copy puts it, tagged with its content hash,
        # into the repository above, where scanning, tag immutability and the lifecycle apply.
        # The RepositoryUri attribute, not repository_uri_for_tag (Fn::Split of the ARN), so that other stacks
        # receive one plain string that cfn-lint can type.
        cfn_repository: ecr.CfnRepository = repository.node.default_child
        image_uri = f"{cfn_repository.attr_repository_uri}:{asset.asset_hash}"
        role = self._copy_role(asset, repository)
        ecr_deployment.ECRDeployment(
            self,
            "CopyImage",
            src=ecr_deployment.DockerImageName(asset.image_uri),
            dest=ecr_deployment.DockerImageName(image_uri),
            memory_limit=COPY_MEMORY_MIB,
            # An immutable view: the construct would otherwise add ecr:* and s3:GetObject on every resource.
            role=role.without_policy_updates(),
            **self._copy_placement(role),
        )
        return repository, image_uri

    def _copy_placement(self, role: iam.Role) -> dict:
        """With compliance: control-tower, the copy runs in the first training subnet (ECR endpoints or NAT,
        S3 gateway) with a security group of its own; otherwise outside any VPC."""
        if self._network is None:
            return {}
        role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(LAMBDA_VPC_ACCESS_POLICY))
        acknowledge(
            role,
            f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{LAMBDA_VPC_ACCESS_POLICY}]",
            LAMBDA_VPC_ACCESS_REASON,
        )
        self.add_stack_dependency(self._network, "the copy runs in the network stack's subnet")
        subnet = ec2.Subnet.from_subnet_attributes(
            self,
            "CopySubnet",
            subnet_id=self._network.handler_subnet_id,
            availability_zone=self._network.availability_zones[0],
        )
        acknowledge(
            subnet,
            "Annotation::@aws-cdk/aws-ec2:noSubnetRouteTableId",
            "Only the copy function's placement reads this subnet; nothing reads its route table.",
        )
        return {"vpc": self._network.vpc, "vpc_subnets": ec2.SubnetSelection(subnets=[subnet])}

    def _copy_role(self, asset: ecr_assets.DockerImageAsset, repository: ecr.Repository) -> iam.Role:
        """Least privilege for the copy: pull from the assets repository, push to ours, write own logs."""
        role = iam.Role(
            self,
            "CopyImageRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="Copies the training image from the CDK assets repository into the training one",
        )
        asset.repository.grant_pull(role)
        repository.grant_pull_push(role)
        # The function's name is generated from the stack name, so its log group is known only by prefix.
        log_group_name = f"/aws/lambda/{self.stack_name}-*"
        log_groups = self.format_arn(
            service="logs",
            resource="log-group",
            resource_name=log_group_name,
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[log_groups, f"{log_groups}:log-stream:*"],
            )
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5[Resource::*]",
            "ecr:GetAuthorizationToken has no resource-level scope (ECR API reference); pulls and pushes are "
            "scoped to the two repositories.",
        )
        # cdk-nag names a resource as rendered: the partition is literal when the region is known.
        partition = "<AWS::Partition>" if cdk.Token.is_unresolved(self.partition) else self.partition
        nag_log_groups = f"arn:{partition}:logs:{self.region}:{self.account}:log-group:{log_group_name}"
        for resource in (nag_log_groups, f"{nag_log_groups}:log-stream:*"):
            acknowledge(
                role,
                f"AwsSolutions-IAM5[Resource::{resource}]",
                "The copy function's name, and so its log group, is generated: only the stack-name prefix "
                "is known when the role is created.",
            )
        return role


def _existing_repository(scope: Construct, uri: str) -> ecr.IRepository:
    """A reference (no resource) to the ECR repository of a configured URI, so pull can be granted."""
    registry, _, rest = uri.partition("/")
    account, _, _, region, *_ = registry.split(".")
    name = rest.split("@")[0].rsplit(":", 1)[0]
    partition = "aws-cn" if registry.endswith(".cn") else "aws"
    return ecr.Repository.from_repository_attributes(
        scope,
        "ExistingRepository",
        repository_arn=f"arn:{partition}:ecr:{region}:{account}:repository/{name}",
        repository_name=name,
    )
