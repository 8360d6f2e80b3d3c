"""What a training job needs to log to the SageMaker managed MLflow tracking servers its profiles name
(training_scripts/mlflow_log.py): the `sagemaker-mlflow` actions of the MLflow calls it makes, on those
servers only.

The actions are those of the REST calls the pinned client (mlflow-skinny 3.17.2) makes for mlflow_log,
recorded against a local MLflow server (tests/iam/mlflow_recording.py; tests/iam/test_mlflow_calls.py
fails when this list and the recording differ): set_experiment (GetExperimentByName; for a new experiment
CreateExperiment, then GetExperiment), start_run (CreateRun), log_params and log_metrics (LogBatch),
end_run (GetRun, then UpdateRun). Each action takes the `mlflow-tracking-server` resource type (Service
Authorization Reference, "Amazon SageMaker with MLflow"; tests/iam checks the grant against it).

With teams, a team with `own_tracking_server` gets its server here (TeamTrackingServer), and its start policy
lets its members use that server (and, with profiles' servers, those) and no other
(trainstack/team_tracking.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from stacks.wildcard_acknowledgments import acknowledge_wildcard_statements
from trainstack.profiles import Profile

MLFLOW_RUN_ACTIONS = (
    "sagemaker-mlflow:GetExperimentByName",
    "sagemaker-mlflow:CreateExperiment",
    "sagemaker-mlflow:GetExperiment",
    "sagemaker-mlflow:CreateRun",
    "sagemaker-mlflow:LogBatch",
    "sagemaker-mlflow:GetRun",
    "sagemaker-mlflow:UpdateRun",
)


def tracking_servers(profiles: Sequence[Profile]) -> list[str]:
    """The tracking servers the profiles name, each once, in config order."""
    return list(dict.fromkeys(p.mlflow_tracking_server_arn for p in profiles if p.mlflow_tracking_server_arn))


def grant_mlflow_tracking(role: iam.IRole, profiles: Sequence[Profile]) -> None:
    """Statement `MlflowTracking` on the job role, when a profile names a tracking server."""
    servers = tracking_servers(profiles)
    if servers:
        role.add_to_principal_policy(
            iam.PolicyStatement(sid="MlflowTracking", actions=list(MLFLOW_RUN_ACTIONS), resources=servers)
        )


# What a team's members may do with their team's servers: the MLflow UI and API (`sagemaker-mlflow:*`, every
# action of which takes the `mlflow-tracking-server` resource type but AccessUI, which takes none), and the
# presigned URL that opens the UI (Service Authorization Reference, "Amazon SageMaker with MLflow" and
# "Amazon SageMaker AI").
MEMBER_SERVER_ACTIONS = (
    "sagemaker-mlflow:*",
    "sagemaker:CreatePresignedMlflowTrackingServerUrl",
    "sagemaker:DescribeMlflowTrackingServer",
)


def member_statements(servers: Sequence[str]) -> list[iam.PolicyStatement]:
    """Statements `OwnTrackingServers` and `MlflowUi` of a team's start policy, for its runs' servers."""
    if not servers:
        return []
    return [
        iam.PolicyStatement(
            sid="OwnTrackingServers", actions=list(MEMBER_SERVER_ACTIONS), resources=list(servers)
        ),
        iam.PolicyStatement(sid="MlflowUi", actions=["sagemaker-mlflow:AccessUI"], resources=["*"]),
    ]


class TeamTrackingServer(Construct):
    """A team's own SageMaker managed MLflow tracking server (teams[].own_tracking_server), its artifacts
    under `mlflow/<server name>/` of the artifact bucket, written by a role of its own that reads and writes
    nothing else. AWS's page "Set up IAM permissions for MLflow" asks the service role for S3 access to the
    artifact store; automatic model registration stays off (the pipeline registers versions itself)."""

    # SageMaker's smallest size (CreateMlflowTrackingServer's TrackingServerSize: Small | Medium | Large).
    SIZE = "Small"

    def __init__(
        self, scope: Construct, construct_id: str, *, name: str, artifact_bucket: s3.IBucket
    ) -> None:
        super().__init__(scope, construct_id)
        prefix = f"mlflow/{name}/"
        role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description=f"The MLflow tracking server {name}: its artifact store (trainstack)",
        )
        # The S3 calls of MLflow's S3ArtifactRepository (mlflow/store/artifact/s3_artifact_repo.py:
        # upload_file, download_file, list_objects_v2, delete_objects), within the server's prefix.
        role.add_to_policy(
            iam.PolicyStatement(
                sid="ArtifactStore",
                actions=["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
                resources=[artifact_bucket.arn_for_objects(f"{prefix}*")],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="ListArtifactStore",
                actions=["s3:ListBucket"],
                resources=[artifact_bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{prefix}*"]}},
            )
        )
        if artifact_bucket.encryption_key is not None:
            artifact_bucket.encryption_key.grant_encrypt_decrypt(role)
        acknowledge_wildcard_statements(
            role,
            {"ArtifactStore": f"The server writes its artifacts under {prefix}, named per run by MLflow."},
        )
        self.server = sagemaker.CfnMlflowTrackingServer(
            self,
            "Server",
            tracking_server_name=name,
            artifact_store_uri=f"s3://{artifact_bucket.bucket_name}/{prefix}",
            role_arn=role.role_arn,
            tracking_server_size=self.SIZE,
            automatic_model_registration=False,
        )
        self.server.node.add_dependency(role)
        self.arn = self.server.attr_tracking_server_arn
        cdk.CfnOutput(
            scope, "TrackingServerArn", value=self.arn, description="The team's MLflow tracking server"
        )
