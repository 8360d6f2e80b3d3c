"""One MLflow home per team (docs/teams.md, "MLflow"): config/examples/teams.yaml with
`own_tracking_server: true` on both teams deploys a tracking server per team; each team's jobs log there in
experiments named after the team, and IAM (simulated offline against the synthesized policies) keeps each
team's job role, members and server role to their own server. Two teams on one server are refused unless
the config says `shared_tracking_server: true`, and then check-config warns."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import NO_ENV, TEAMS_CONFIG, synthesize
from tests.iam import sar
from tests.iam.calls import Call
from tests.iam.deployed import DeployedApp
from tests.iam.test_team_isolation import SECURE, TeamsDeployment, decisions
from tests.infra.templates import load_templates, resources
from tests.queue.test_queue_config import config_error, settings_with
from trainstack.config_loading import parse_settings

TEAMS = ("research", "search")
PROFILES = {"research": ("llama-7b-smp", "small-torchrun"), "search": ("small-torchrun",)}  # teams.yaml
DEFAULT_SERVER = "arn:aws:sagemaker:us-east-1:111111111111:mlflow-tracking-server/trainstack"  # default.yaml


def server_arn(team: str) -> str:
    return f"arn:aws:sagemaker:us-east-1:111111111111:mlflow-tracking-server/trainstack-{team}"


@pytest.fixture(scope="module")
def own_servers(tmp_path_factory):
    """teams.yaml, each team with a tracking server of its own, synthesized once (cdk-nag on)."""
    data = yaml.safe_load(TEAMS_CONFIG.read_text())
    for team in data["teams"]:
        team["own_tracking_server"] = True
    settings = parse_settings(data, NO_ENV, source="teams with own servers")
    _, assembly = synthesize(settings, tmp_path_factory.mktemp("mlflow.cdk.out"))
    deployed = DeployedApp(Path(assembly.directory), settings.account, settings.region)
    return settings, assembly, TeamsDeployment(deployed, settings.account, settings.region)


def test_each_team_has_one_tracking_server_in_its_own_stack(own_servers):
    _, assembly, _ = own_servers
    for team in TEAMS:
        template = assembly.get_stack_by_name(f"trainstack-{team}-pipeline").template
        [server] = resources(template, "AWS::SageMaker::MlflowTrackingServer").values()
        properties = server["Properties"]
        assert properties["TrackingServerName"] == f"trainstack-{team}"
        assert properties["AutomaticModelRegistration"] is False
        assert json.dumps(properties["ArtifactStoreUri"]).endswith(f'/mlflow/trainstack-{team}/"]]}}')
    for shared in ("trainstack-network", "trainstack-storage", "trainstack-queue"):
        template = assembly.get_stack_by_name(shared).template
        assert resources(template, "AWS::SageMaker::MlflowTrackingServer") == {}


def test_every_grant_of_the_team_servers_matches_the_service_authorization_reference(own_servers):
    """The job roles', the members' and the servers' own statements: action names, resource types."""
    settings, assembly, _ = own_servers
    templates = load_templates(Path(assembly.directory))
    found = [str(finding) for finding in sar.check(templates, settings.region, settings.account)]
    assert not found, "\n".join(found)


def test_each_teams_jobs_log_to_its_own_server_in_experiments_named_after_the_team(own_servers):
    _, assembly, _ = own_servers
    for team in TEAMS:
        # The job requests lie in the machines' definitions as JSON strings within strings: unescaped here.
        template = json.dumps(assembly.get_stack_by_name(f"trainstack-{team}-pipeline").template)
        requests = template.replace("\\", "")
        assert f'"MLFLOW_TRACKING_URI":"{server_arn(team)}"' in requests
        for profile in PROFILES[team]:
            assert f'"MLFLOW_EXPERIMENT_NAME":"{team}-{profile}"' in requests
        assert server_arn(next(t for t in TEAMS if t != team)) not in template


def test_the_deploy_review_refuses_to_delete_a_teams_server_unless_named(own_servers):
    """Turning own_tracking_server off deletes the server with its runs: a stateful resource."""
    from trainstack.deploy_findings import findings

    _, assembly, _ = own_servers
    old = load_templates(Path(assembly.directory))
    new = copy.deepcopy(old)
    stack = new["trainstack-search-pipeline"]["Resources"]
    [server_id] = resources(new["trainstack-search-pipeline"], "AWS::SageMaker::MlflowTrackingServer")
    del stack[server_id]
    [finding] = findings(old, new)
    assert (finding.stack, finding.logical_id) == ("trainstack-search-pipeline", server_id)
    assert finding.sentence == (
        f"trainstack-search-pipeline {server_id} (AWS::SageMaker::MlflowTrackingServer) would be REMOVED: it "
        "is DELETED, with its experiments and runs (their artifacts stay in the artifact bucket)."
    )


def test_a_teams_job_role_logs_only_to_its_own_server(own_servers):
    """Finding 4 of the teams' second read: every job role had the MLflow calls on one shared server."""
    _, _, teams = own_servers
    calls = [
        Call(
            f"{caller} {action} on {owner}'s",
            teams.role(caller, "SageMakerExecutionRole"),
            action,
            server_arn(owner),
        )
        for caller in TEAMS
        for owner in TEAMS
        for action in ("sagemaker-mlflow:LogBatch", "sagemaker-mlflow:UpdateRun", "sagemaker-mlflow:GetRun")
    ]
    allowed = decisions(calls)
    assert sorted(caller for caller, ok in allowed.items() if ok) == sorted(
        f"{team} {action} on {team}'s"
        for team in TEAMS
        for action in ("sagemaker-mlflow:LogBatch", "sagemaker-mlflow:UpdateRun", "sagemaker-mlflow:GetRun")
    )


def test_a_teams_members_open_and_read_only_their_own_server(own_servers):
    _, _, teams = own_servers
    member = teams.principal("research", "arn:aws:iam::111111111111:role/ml-research")
    calls = [
        Call(f"{owner} {action}", member, action, server_arn(owner))
        for owner in TEAMS
        for action in (
            "sagemaker:CreatePresignedMlflowTrackingServerUrl",
            "sagemaker-mlflow:SearchRuns",
            "sagemaker-mlflow:DeleteRun",
        )
    ] + [Call("research opens the UI", member, "sagemaker-mlflow:AccessUI", "*")]
    allowed = decisions(calls)
    assert sorted(caller for caller, ok in allowed.items() if ok) == [
        "research opens the UI",
        "research sagemaker-mlflow:DeleteRun",
        "research sagemaker-mlflow:SearchRuns",
        "research sagemaker:CreatePresignedMlflowTrackingServerUrl",
    ]


def test_a_teams_server_writes_only_its_own_artifact_prefix(own_servers):
    _, _, teams = own_servers
    artifacts = teams.substitutions("research")["ArtifactBucket"]
    server_role = teams.role("research", "TrackingServerRole")
    calls = [
        Call(f"{owner} {action}", server_role, action, f"arn:aws:s3:::{artifacts}{prefix}", SECURE)
        for owner in TEAMS
        for action, prefix in (
            ("s3:PutObject", f"/mlflow/trainstack-{owner}/1/run/artifacts/model.pt"),
            ("s3:GetObject", f"/mlflow/trainstack-{owner}/1/run/artifacts/model.pt"),
        )
    ] + [
        Call(
            "research's runs",
            server_role,
            "s3:GetObject",
            f"arn:aws:s3:::{artifacts}/trainstack-research-r1/x",
        )
    ]
    allowed = decisions(calls)
    assert sorted(caller for caller, ok in allowed.items() if ok) == [
        "research s3:GetObject",
        "research s3:PutObject",
    ]


TEAM = {
    "principals": ["arn:aws:iam::111111111111:role/ml-a"],
    "max_instances": 4,
    "max_runtime_hours": 72,
    "max_cost_usd": 2_500,
}


def two_teams(**search) -> list[dict]:
    """Two teams running default.yaml's small-torchrun, which names one tracking server."""
    return [
        {**TEAM, "name": "research", "profiles": ["small-torchrun"]},
        {
            **TEAM,
            "name": "search",
            "profiles": ["small-torchrun"],
            "principals": ["arn:aws:iam::111111111111:role/ml-b"],
            **search,
        },
    ]


def test_two_teams_on_one_server_are_refused_unless_the_config_shares_it_and_check_config_warns(
    tmp_path, capsys
):
    assert (
        f"teams research and search would log to the same MLflow tracking server {DEFAULT_SERVER} (their "
        "profiles' mlflow_tracking_server_arn), where each reads and overwrites the other's runs; give each "
        "team own_tracking_server: true, or set shared_tracking_server: true"
    ) in config_error({"teams": two_teams()})
    # One team on a server of its own is no share: the other keeps the profile's.
    own = settings_with({"teams": two_teams(own_tracking_server=True)})
    assert [p.mlflow_tracking_server_arn for p in own.profiles if p.name == "small-torchrun"] == [
        DEFAULT_SERVER
    ]
    assert "shared_tracking_server: only a config with teams shares a server; remove it" in config_error(
        {"shared_tracking_server": True}
    )

    from tests.conftest import deep_merge, default_config_data
    from trainstack.cli import main

    config = tmp_path / "shared.yaml"
    config.write_text(
        yaml.safe_dump(
            deep_merge(default_config_data(), {"teams": two_teams(), "shared_tracking_server": True})
        )
    )
    assert main(["check-config", str(config)]) == 0
    assert (
        f"warning: shared_tracking_server: MLflow tracking servers shared by teams ({DEFAULT_SERVER} by "
        "research, search): IAM grants MLflow per server, so each of these teams' jobs and members can read "
        "and overwrite the others' runs"
    ) in capsys.readouterr().err


def test_a_config_without_teams_logs_to_the_profiles_experiment():
    from trainstack.pipeline_runs import all_pipeline_runs

    [runs] = all_pipeline_runs(settings_with({}))
    small = runs.profile("small-torchrun")
    assert (small.mlflow_tracking_server_arn, small.mlflow_experiment) == (DEFAULT_SERVER, None)
    assert runs.tracking_server is None
