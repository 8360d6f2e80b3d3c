"""Who may read and write a team's own code (trainstack.team_code): s3://<artifact bucket>/code/<namespace>/.

The pipeline's SageMaker role reads it (the training toolkit downloads `sagemaker_submit_directory` with the
job's credentials) and never writes it: the role writes the runs' `<namespace>-*` prefixes only, so no job can
replace a bundle behind its digest. The team's start policy may upload there (`trainstack start --code`). The
pipeline stack outputs the prefix, which the CLI reads."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct

from stacks.pipeline.team_access import TeamAccess
from stacks.storage.storage_stack import StorageStack
from stacks.wildcard_acknowledgments import acknowledge_wildcard_statements
from trainstack.team_code import CODE_PREFIX_OUTPUT, code_key_prefix, code_prefix

BUNDLES_REASON = (
    "Bundles are named by their sha256, computed per upload; the team's code prefix is the scope."
)


def grant_team_code_reads(sagemaker_role: iam.Role, namespace: str, storage: StorageStack) -> None:
    """The jobs' role reads the namespace's code (the toolkit downloads it), and writes none of it."""
    bundles = storage.artifact_bucket.arn_for_objects(f"{code_key_prefix(namespace)}*")
    sagemaker_role.add_to_policy(
        iam.PolicyStatement(sid="ReadTeamCode", actions=["s3:GetObject"], resources=[bundles])
    )
    acknowledge_wildcard_statements(sagemaker_role, {"ReadTeamCode": BUNDLES_REASON})


def publish_team_code(
    scope: Construct, namespace: str, storage: StorageStack, team_access: TeamAccess | None
) -> None:
    """The prefix as the pipeline stack's output; with teams, the team's start policy uploads there."""
    bundles = storage.artifact_bucket.arn_for_objects(f"{code_key_prefix(namespace)}*")
    if team_access is not None:
        # GetObject: the CLI's HeadObject before an upload (a bundle already there is not sent again).
        team_access.grant_members(
            iam.PolicyStatement(
                sid="UploadTeamCode", actions=["s3:PutObject", "s3:GetObject"], resources=[bundles]
            )
        )
        if storage.encryption_key is not None:
            team_access.grant_members(
                iam.PolicyStatement(
                    sid="EncryptTeamCode",
                    actions=["kms:GenerateDataKey", "kms:Decrypt"],
                    resources=[storage.encryption_key.key_arn],
                )
            )
        acknowledge_wildcard_statements(team_access.policy, {"UploadTeamCode": BUNDLES_REASON})
    cdk.CfnOutput(
        scope,
        CODE_PREFIX_OUTPUT,
        value=code_prefix(storage.artifact_bucket.bucket_name, namespace),
        description="Where trainstack start --code uploads the team's code (by sha256)",
    )
