"""An ML team member's `trainstack` with only the deployment's name and the team: no YAML, no checkout. Each
team's pipeline stack publishes the settings the CLI reads (an SSM parameter, trainstack/client_settings.py);
here the parameter is put into moto as the synthesized template of config/examples/teams.yaml declares it."""

from __future__ import annotations

import json

import boto3
import pytest

from tests.aws_fixtures import REGION, SUCCEEDS, publish_output
from trainstack.cli import main
from trainstack.client_settings import client_parameter_name
from trainstack.config import Settings

TEAM_STACK = "trainstack-research-pipeline"


def resources_of(template: dict, kind: str) -> list[dict]:
    return [body["Properties"] for body in template["Resources"].values() if body["Type"] == kind]


@pytest.fixture(scope="module")
def research_template(teams_app) -> dict:
    _, _, assembly = teams_app
    return assembly.get_stack_by_name(TEAM_STACK).template


@pytest.fixture
def deployed(aws, research_template, monkeypatch, tmp_path):
    """Team research's parameter and pipeline as deployed; the CLI runs where there is no config file, and
    reading one fails the test."""
    (parameter,) = resources_of(research_template, "AWS::SSM::Parameter")
    boto3.client("ssm", region_name=REGION).put_parameter(
        Name=parameter["Name"], Value=parameter["Value"], Type=parameter["Type"], Tier=parameter["Tier"]
    )
    arn = boto3.client("stepfunctions", region_name=REGION).create_state_machine(
        name=TEAM_STACK, definition=json.dumps(SUCCEEDS), roleArn=state_machine_role()
    )["stateMachineArn"]
    publish_output(TEAM_STACK, "StateMachineArn", arn)
    monkeypatch.chdir(tmp_path)

    def no_yaml(*_):
        raise AssertionError("the CLI read a config file")

    monkeypatch.setattr("trainstack.commands.common.load_settings", no_yaml)
    return arn


def state_machine_role() -> str:
    return "arn:aws:iam::123456789012:role/trainstack-research-pipeline"


def test_each_team_stack_publishes_its_settings_and_only_its_start_policy_reads_them(teams_app):
    _, _, assembly = teams_app
    for team in ("research", "search"):
        template = assembly.get_stack_by_name(f"trainstack-{team}-pipeline").template
        (parameter,) = resources_of(template, "AWS::SSM::Parameter")
        assert parameter["Name"] == client_parameter_name("trainstack", team) == f"/trainstack-{team}/client"
        assert parameter["Tier"] == "Standard" and len(parameter["Value"]) < 4096
        # Another team's entry (its name, caps, principals) is not published to this team.
        published = Settings.model_validate(json.loads(parameter["Value"]))
        assert [entry.name for entry in published.teams] == [team]
        (policy,) = resources_of(template, "AWS::IAM::ManagedPolicy")
        (read,) = [s for s in policy["PolicyDocument"]["Statement"] if s.get("Sid") == "ReadClientSettings"]
        assert read["Action"] == "ssm:GetParameter"
        assert read["Resource"] == f"arn:aws:ssm:us-east-1:111111111111:parameter/trainstack-{team}/client"


def test_start_with_only_the_deployment_and_the_team_checks_the_teams_caps_and_starts(deployed, capsys):
    start = ["start", "--deployment", "trainstack", "--team", "research", "--profile", "small-torchrun"]
    # Team research's cap (max_instances: 4) comes from the published settings: refused before any AWS call.
    assert main([*start, "--instance-count", "5"]) == 2
    assert "--instance-count" in capsys.readouterr().err
    assert main([*start, "--run-name", "trainstack-research-nightly"]) == 0
    (item,) = boto3.client("stepfunctions", region_name=REGION).list_executions(stateMachineArn=deployed)[
        "executions"
    ]
    assert item["name"] == "trainstack-research-nightly"


def test_the_environment_names_the_deployment_and_the_team(deployed, monkeypatch):
    monkeypatch.setenv("TRAINSTACK_DEPLOYMENT", "trainstack")
    monkeypatch.setenv("TRAINSTACK_TEAM", "research")
    assert main(["start", "--profile", "small-torchrun", "--run-name", "trainstack-research-env"]) == 0


@pytest.mark.parametrize(
    ("flags", "sentence"),
    [
        (
            ["--deployment", "trainstack", "--team", "vision"],
            "--deployment trainstack --team vision: no parameter /trainstack-vision/client in us-east-1",
        ),
        (
            ["--deployment", "trainstack", "--team", "research", "--config", "config/examples/teams.yaml"],
            "--deployment and --config (or $TRAINSTACK_DEPLOYMENT and $TRAINSTACK_CONFIG) both name",
        ),
    ],
)
def test_a_deployment_the_cli_cannot_read_ends_in_one_sentence(deployed, capsys, flags, sentence):
    assert main(["start", "--profile", "small-torchrun", *flags]) == 2
    err = capsys.readouterr().err
    assert sentence in err and len(err.strip().splitlines()) == 1, err
