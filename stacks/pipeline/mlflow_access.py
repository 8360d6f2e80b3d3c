"""What a training job needs to log to the SageMaker managed MLflow tracking servers its profiles name
(training_scripts/mlflow_log.py): the `sagemaker-mlflow` actions of the MLflow calls it makes, on those
servers only.

The calls are those of MLflow's fluent API as mlflow_log uses it: set_experiment (GetExperimentByName,
then CreateExperiment for a new one), start_run (CreateRun), log_params and log_metrics (LogBatch),
end_run (UpdateRun). Each action takes the `mlflow-tracking-server` resource type (Service Authorization
Reference, "Amazon SageMaker with MLflow"; tests/iam checks the grant against it).
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_iam as iam

from trainstack.profiles import Profile

MLFLOW_RUN_ACTIONS = (
    "sagemaker-mlflow:GetExperimentByName",
    "sagemaker-mlflow:CreateExperiment",
    "sagemaker-mlflow:CreateRun",
    "sagemaker-mlflow:LogBatch",
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
