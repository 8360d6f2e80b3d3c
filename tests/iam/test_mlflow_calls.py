"""The job role's MLflow grant is the set of calls the pinned MLflow client really makes for
training_scripts/mlflow_log.py (tests/iam/mlflow_recording.py): none missing, none extra."""

from __future__ import annotations

from aws_cdk import App, Stack, assertions
from aws_cdk import aws_iam as iam

from stacks.pipeline.mlflow_access import grant_mlflow_tracking
from tests.conftest import NO_ENV, default_config_data
from tests.iam import sar
from tests.iam.conftest import MLFLOW_SERVER, with_plan_and_schedule
from tests.iam.mlflow_recording import action_of, recorded_actions, recorded_calls
from trainstack.config_loading import parse_settings


def synthesized_grant() -> dict:
    """The MlflowTracking statement of a role granted as the pipeline grants the job role."""
    settings = parse_settings(with_plan_and_schedule(default_config_data()), NO_ENV, source="mlflow test")
    stack = Stack(App(), "Grant")
    role = iam.Role(stack, "JobRole", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
    grant_mlflow_tracking(role, settings.profiles)
    [policy] = assertions.Template.from_stack(stack).find_resources("AWS::IAM::Policy").values()
    [statement] = [
        s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Sid"] == "MlflowTracking"
    ]
    return statement


def test_the_client_creates_the_experiment_then_reads_it_and_reads_the_run_before_ending_it():
    """The two calls a hand-written list left out (DESIGN.md round 6), as the recording shows them."""
    actions = [action_of(call) for call in recorded_calls()]
    first_job = actions[: actions.index("sagemaker-mlflow:UpdateRun") + 1]
    assert first_job[:3] == [
        "sagemaker-mlflow:GetExperimentByName",
        "sagemaker-mlflow:CreateExperiment",
        "sagemaker-mlflow:GetExperiment",
    ]
    assert first_job[-2:] == ["sagemaker-mlflow:GetRun", "sagemaker-mlflow:UpdateRun"]


def test_the_job_role_is_granted_exactly_the_recorded_mlflow_calls_on_the_profiles_server():
    statement = synthesized_grant()
    granted = set(sar.as_list(statement["Action"]))
    assert set(recorded_actions()) - granted == set(), "calls the job would be denied"
    assert granted - set(recorded_actions()) == set(), "granted, never called"
    assert MLFLOW_SERVER in sar.as_list(statement["Resource"])


def test_every_recorded_call_is_a_sagemaker_mlflow_action_of_the_service_authorization_reference():
    assert [action for action in recorded_actions() if not sar.expand(action)] == []
