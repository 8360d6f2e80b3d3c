"""What a training job needs to log to the SageMaker managed MLflow tracking servers its profiles name
(training_scripts/mlflow_log.py): the `sagemaker-mlflow` actions of the MLflow calls it makes, on those
servers only.

The actions are those of the REST calls the pinned client (mlflow-skinny 3.17.2) makes for mlflow_log,
recorded against a local MLflow server (tests/iam/mlflow_recording.py; tests/iam/test_mlflow_calls.py
fails when this list and the recording differ): set_experiment (GetExperimentByName; for a new experiment
CreateExperiment, then GetExperiment), start_run (CreateRun), log_params and log_metrics (LogBatch),
end_run (GetRun, then UpdateRun). Each action takes the `mlflow-tracking-server` resource type (Service
Authorization Reference, "Amazon SageMaker with MLflow"; tests/iam checks the grant against it).
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_iam as iam

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
