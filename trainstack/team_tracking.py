"""Where each team's jobs log to MLflow (docs/teams.md, "MLflow"): one tracking server per team.

A team with `own_tracking_server: true` gets a SageMaker managed MLflow tracking server named after its
namespace, `<project>-<team>`, created in its pipeline stack; every job of the team logs there. Otherwise a
team's jobs log where their profiles say (`mlflow_tracking_server_arn`). IAM authorizes MLflow per tracking
server only (the `sagemaker-mlflow` actions take the `mlflow-tracking-server` resource type and no condition
keys, Service Authorization Reference): two teams on one server read and overwrite each other's runs. So a
server reached by two teams is refused unless the config says `shared_tracking_server: true`, and then
check-config and synth warn. With teams, experiments are named `<team>-<profile>`; without teams, after the
profile, as they always were.
"""

from __future__ import annotations

from typing import Any

import botocore.session

from trainstack.profiles import Profile
from trainstack.teams import Team, namespace


def tracking_server_name(project: str, team: str) -> str:
    """The team's own server: its namespace (a valid TrackingServerName: letters, digits and hyphens)."""
    return namespace(project, team)


def tracking_server_arn(region: str, account: str, server_name: str) -> str:
    partition = botocore.session.get_session().get_partition_for_region(region)
    return f"arn:{partition}:sagemaker:{region}:{account}:mlflow-tracking-server/{server_name}"


def experiment_name(team: str, profile: str) -> str:
    return f"{team}-{profile}"


def team_mlflow(profile: Profile, team: Team, settings: Any) -> dict[str, str | None]:
    """The profile's MLflow fields as the team runs it: the team's own server where it has one, and an
    experiment named after the team and the profile (a model_copy update for team_profile)."""
    server = (
        tracking_server_arn(
            settings.region, settings.account, tracking_server_name(settings.project, team.name)
        )
        if team.own_tracking_server
        else profile.mlflow_tracking_server_arn
    )
    return {
        "mlflow_tracking_server_arn": server,
        "mlflow_experiment": experiment_name(team.name, profile.mlflow_experiment or profile.name)
        if server
        else None,
    }


def shared_servers(settings: Any) -> dict[str, list[str]]:
    """Each tracking server that the runs of two teams or more would log to, with those teams."""
    teams_of: dict[str, list[str]] = {}
    for team in settings.teams:
        if team.own_tracking_server:
            continue
        servers = {settings.profile(name).mlflow_tracking_server_arn for name in team.profiles}
        for server in sorted(filter(None, servers)):
            teams_of.setdefault(server, []).append(team.name)
    return {server: names for server, names in teams_of.items() if len(names) > 1}


def check_tracking_servers(settings: Any) -> Any:
    """Settings' after-validator: no tracking server is shared by teams unless the config says so."""
    if settings.shared_tracking_server and not settings.teams:
        raise ValueError("shared_tracking_server: only a config with teams shares a server; remove it")
    if settings.shared_tracking_server:
        return settings
    for server, teams in shared_servers(settings).items():
        raise ValueError(
            f"teams {' and '.join(teams)} would log to the same MLflow tracking server {server} (their "
            "profiles' mlflow_tracking_server_arn), where each reads and overwrites the other's runs; give "
            "each team own_tracking_server: true, or set shared_tracking_server: true"
        )
    return settings


def shared_server_warning(settings: Any) -> str | None:
    """What check-config and synth say of a server shared on purpose (shared_tracking_server: true)."""
    shared = shared_servers(settings)
    if not shared:
        return None
    servers = "; ".join(f"{server} by {', '.join(teams)}" for server, teams in shared.items())
    return (
        f"shared_tracking_server: MLflow tracking servers shared by teams ({servers}): IAM grants MLflow per "
        "server, so each of these teams' jobs and members can read and overwrite the others' runs"
    )


def uses_mlflow(settings: Any) -> bool:
    """Some job logs to MLflow: the network then needs SageMaker's experiments endpoint."""
    return any(p.mlflow_tracking_server_arn for p in settings.profiles) or any(
        team.own_tracking_server for team in settings.teams
    )
