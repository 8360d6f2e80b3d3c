"""Grants the previous release's registration definition uses and this release's no longer does, kept one more
release for the registrations in flight on it (docs/pipeline.md, "What a deploy does to runs in flight").

A running execution keeps its definition but calls AWS with its role's *current* policies, and a role is
shared by every version of its machine: a grant leaves a role only in the release after the last one whose
definitions call it (tests/pipeline/test_inflight_grants.py checks the previous release's actions against
this release's).

Release 19fc479's registration machine ran its evaluation job itself (CreateTrainingJob with AddTags,
DescribeTrainingJob, PassRole of the SageMaker role) and listed the dataset bucket in its own history; this
release runs them in the attempt and dataset-manifest machines. The statements below are 19fc479's, as they
were. Remove them in the release after this one.
"""

from __future__ import annotations

from aws_cdk import aws_iam as iam

from stacks.validation import acknowledge


def carry_registration_grants(
    role: iam.IRole, *, job_arn: str, sagemaker_role: iam.IRole, dataset_bucket_arn: str
) -> None:
    """Release 19fc479's evaluation and listing grants on the registration role."""
    for statement in (
        iam.PolicyStatement(
            sid="CarriedCreateEvaluationJobs",
            actions=["sagemaker:CreateTrainingJob", "sagemaker:AddTags", "sagemaker:DescribeTrainingJob"],
            resources=[job_arn],
        ),
        iam.PolicyStatement(
            sid="CarriedPassSageMakerRole",
            actions=["iam:PassRole"],
            resources=[sagemaker_role.role_arn],
            conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
        ),
        iam.PolicyStatement(
            sid="CarriedListDatasets", actions=["s3:ListBucket"], resources=[dataset_bucket_arn]
        ),
    ):
        role.add_to_principal_policy(statement)
    acknowledge(
        role,
        f"AwsSolutions-IAM5[Resource::{job_arn}]",
        "Registrations in flight on the previous release create and follow their evaluation jobs, named "
        "at run time under the project's prefix.",
    )
