"""IAM keeps each team's retrain trigger to its own team (config/examples/teams.yaml, both teams with
`retrain_on_new_data`): the trigger machine's role starts only the team's own pipeline and writes only the
team's own trigger table, and the role EventBridge uses starts only the team's own trigger machine. Simulated
offline against the synthesized policies; each denial is paired with the same call on the team's own
resources, which must be allowed."""

from __future__ import annotations

from pathlib import Path

from tests.iam.calls import Call
from tests.iam.deployed import DeployedApp
from tests.iam.test_team_isolation import TeamsDeployment, decisions
from trainstack.trigger_settings import trigger_machine_name, trigger_table_name


def test_a_teams_trigger_starts_and_writes_only_its_own_team(teams_app):
    settings, _, assembly = teams_app
    app = DeployedApp(Path(assembly.directory), settings.account, settings.region)
    teams = TeamsDeployment(app, settings.account, settings.region)
    trigger = teams.role("research", "RetrainTriggerStateMachineRole")
    events = teams.role("research", "RetrainTriggerStateMachineEventsRole")

    def table(team: str) -> str:
        name = trigger_table_name(f"trainstack-{team}")
        return f"arn:aws:dynamodb:{teams.region}:{teams.account}:table/{name}"

    calls = []
    for team in ("research", "search"):
        whose = "its own" if team == "research" else "search's"
        pipeline, machine = f"trainstack-{team}-pipeline", trigger_machine_name(f"trainstack-{team}")
        calls += [
            Call(
                f"trigger starts {whose} pipeline",
                trigger,
                "states:StartExecution",
                teams.machine_arn(pipeline),
            ),
            Call(f"trigger writes {whose} table", trigger, "dynamodb:UpdateItem", table(team)),
            Call(f"rule starts {whose} trigger", events, "states:StartExecution", teams.machine_arn(machine)),
        ]
    allowed = decisions(calls)
    assert [caller for caller, ok in allowed.items() if ok] == [
        "trigger starts its own pipeline",
        "trigger writes its own table",
        "rule starts its own trigger",
    ]
