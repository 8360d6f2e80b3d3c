"""Every Allow grant of the whole app, in every config mode, against AWS's Service Authorization Reference
(tests/iam/sar.py; docs/iam.md). A finding prints one line: template, principal (policy), statement,
action, what is missing."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.checkpoint_store_modes import STORE_MODES
from tests.conftest import NO_ENV, deep_merge, default_config_data
from tests.iam import sar
from tests.iam.conftest import MLFLOW_SERVER, with_express_checkpoints
from tests.infra.conftest import IMPORTED_VPC_PERSISTENT_500
from tests.infra.templates import load_templates, resources
from tests.infra.test_governed import GOVERNED
from tests.infra.test_run_data_key import with_run_data_key
from tests.queue.test_queue_config import QUEUE

TRAINING_PLAN = "arn:aws:sagemaker:us-east-1:111111111111:training-plan/p5-reserved"


def _with_training_plan(data: dict[str, Any]) -> dict[str, Any]:
    data["profiles"][0]["instance_preferences"][0]["training_plan_arn"] = TRAINING_PLAN
    # The plan's profile registers its runs too: its evaluation jobs name the plan (docs/registry.md). The
    # check holds every principal that creates jobs to every plan named in the mode.
    data["profiles"][0]["registry"] = {"evaluation_prefix": "evaluation/llama/"}
    return data


def _with_schedule(data: dict[str, Any]) -> dict[str, Any]:
    data["profiles"][1]["schedule"] = "cron(0 3 ? * SUN *)"
    data["profiles"][1]["mlflow_tracking_server_arn"] = MLFLOW_SERVER
    data["notification_emails"] = ["ml-team@example.com"]
    return data


# Config modes: the default config already runs one profile on spot capacity (small-torchrun).
MODES = {
    "default": lambda data: data,
    "queue": lambda data: deep_merge(data, {"queue": QUEUE}),
    "control-tower": lambda data: deep_merge(data, GOVERNED),
    "training-plan": _with_training_plan,
    "imported-vpc": lambda data: deep_merge(data, IMPORTED_VPC_PERSISTENT_500),
    "fsx-off": lambda data: deep_merge(data, {"fsx": {"enabled": False, "throughput_mbps": None}}),
    "schedules": _with_schedule,
    "customer-managed-key": lambda data: with_express_checkpoints(with_run_data_key(data)),
    # Every profile on one checkpoint store, in each governance mode (tests/checkpoint_store_modes.py).
    **STORE_MODES,
}
# Optional resource types our requests name, per mode: CreateTrainingJob names the training plan of an
# instance preference (InstancePreferences[].TrainingPlanArns), and the plan user needs permission to use
# it (SageMaker Developer Guide, "IAM for SageMaker training plans").
NAMED = {"training-plan": {"sagemaker:CreateTrainingJob": [TRAINING_PLAN]}}


@pytest.fixture(scope="module")
def synthesized(synthesized_directory):
    """synthesized(mode) -> (settings, templates), each mode's whole app synthesized once per session."""
    from trainstack.config_loading import parse_settings

    apps: dict[str, tuple[Any, dict[str, dict[str, Any]]]] = {}

    def build(name: str):
        if name not in apps:
            settings = parse_settings(MODES[name](default_config_data()), NO_ENV, source=name)
            apps[name] = settings, load_templates(synthesized_directory(settings))
        return apps[name]

    return build


@pytest.fixture(params=sorted(MODES))
def mode(request, synthesized) -> tuple[str, Any, dict[str, dict[str, Any]]]:
    return request.param, *synthesized(request.param)


def findings(name: str, settings, templates: dict[str, dict[str, Any]]) -> list[str]:
    found = sar.check(templates, settings.region, settings.account, NAMED.get(name))
    return sorted(str(finding) for finding in found)


def test_every_grant_matches_the_service_authorization_reference(mode):
    name, settings, templates = mode
    lines = findings(name, settings, templates)
    assert not lines, f"{name}: {len(lines)} finding(s)\n" + "\n".join(lines)


def test_no_state_machine_is_express(mode):
    """sar.NEVER_NAMED holds: DescribeExecution's `express` resource type is never named."""
    _, _, templates = mode
    for template in templates.values():
        for machine in resources(template, "AWS::StepFunctions::StateMachine").values():
            assert machine["Properties"].get("StateMachineType", "STANDARD") == "STANDARD"


# --- the checker finds what it should --------------------------------------------------------------------


@pytest.fixture
def queued_templates(synthesized) -> dict[str, dict[str, Any]]:
    return synthesized("queue")[1]


def _statements(templates, action: str):
    """The identity policy statements granting `action` (IAM action names are case-insensitive)."""
    for template in templates.values():
        for body in resources(template, "AWS::IAM::Policy").values():
            for statement in body["Properties"]["PolicyDocument"]["Statement"]:
                if action.lower() in (granted.lower() for granted in sar.as_list(statement["Action"])):
                    yield statement


def _check(templates, named=None) -> list[str]:
    return [str(finding) for finding in sar.check(templates, "us-east-1", "111111111111", named)]


def test_a_submit_grant_narrowed_to_the_queue_is_reported(queued_templates):
    broken = copy.deepcopy(queued_templates)
    # The queue's statement and the service job's (each with its condition keys): both on the queue only.
    statements = list(_statements(broken, "batch:SubmitServiceJob"))
    [queue] = [s["Resource"] for s in statements if "service-job" not in json.dumps(s["Resource"])]
    for statement in statements:
        statement["Resource"] = queue
    lines = [line for line in _check(broken) if "SubmitServiceJob" in line]
    assert lines and all("required resource type service-job*" in line for line in lines)


def test_describe_service_job_on_service_job_arns_is_reported(queued_templates):
    """The grant as it was: DescribeServiceJob moved to a statement of its own on `service-job/*`."""
    broken = copy.deepcopy(queued_templates)
    for statement in _statements(broken, "batch:DescribeServiceJob"):
        statement["Action"] = [
            action
            for action in sar.as_list(statement["Action"])
            if action.lower() != "batch:describeservicejob"
        ]
        statement["Resource"] = "arn:aws:batch:us-east-1:111111111111:service-job/*"
        statement["Action"].append("batch:DescribeServiceJob")
    lines = [line for line in _check(broken) if "DescribeServiceJob" in line]
    # The attempt, the queue cleanup (it reads each job's execution tag) and the queue sweeper.
    assert len(lines) == 3 and all('must be granted on "*"' in line for line in lines), lines


def test_a_removed_grant_or_a_misspelt_action_or_condition_key_is_reported(queued_templates):
    broken = copy.deepcopy(queued_templates)
    [stop] = [s for s in _statements(broken, "sagemaker:StopTrainingJob") if "AWSBatch" in json.dumps(s)][:1]
    stop["Action"] = "sagemaker:StopTrainingJobs"
    stop["Condition"] = {"StringLike": {"sagemaker:TrainingJobName": "AWSBatch*"}}
    lines = _check(broken)
    assert any("StopTrainingJobs: no such action" in line for line in lines), lines
    broken = copy.deepcopy(queued_templates)
    [stop] = [s for s in _statements(broken, "sagemaker:StopTrainingJob") if "AWSBatch" in json.dumps(s)][:1]
    stop["Condition"] = {"StringLike": {"sagemaker:TrainingJobName": "AWSBatch*"}}
    assert any("condition key sagemaker:TrainingJobName is not supported" in line for line in _check(broken))


def test_a_training_plan_the_grant_does_not_name_is_reported(queued_templates):
    other_plan = "arn:aws:sagemaker:us-east-1:111111111111:training-plan/other"
    lines = _check(queued_templates, {"sagemaker:DescribeTrainingJob": [other_plan]})
    assert lines and all(f"names {other_plan}" in line for line in lines)
