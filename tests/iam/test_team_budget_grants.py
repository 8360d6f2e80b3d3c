"""IAM holds a team's budget to the team (config/examples/teams.yaml, where research has a budget;
docs/teams.md, "Budgets across runs"), simulated offline against the synthesized policies: research's
pipeline, which reserves, and its release machine, which releases, read and write research's item in
research's budget table, and neither another key in it (dynamodb:LeadingKeys) nor another team's table;
the release machine describes only research's executions."""

from __future__ import annotations

from tests.iam.calls import Call
from tests.iam.test_team_isolation import decisions, teams  # noqa: F401 (the module fixture)
from trainstack.team_budgets import budget_table_name


def test_a_teams_machines_reserve_and_release_only_in_the_teams_own_budget(teams):  # noqa: F811
    def table(team: str) -> str:
        return (
            f"arn:aws:dynamodb:{teams.region}:{teams.account}:table/{budget_table_name(f'trainstack-{team}')}"
        )

    calls = []
    for machine, actions in (
        ("TrainingStateMachineRole", ("dynamodb:UpdateItem", "dynamodb:GetItem")),
        ("TrainingBudgetReleaseStateMachineRole", ("dynamodb:UpdateItem", "dynamodb:GetItem")),
    ):
        role = teams.role("research", machine)
        for action in actions:
            for table_owner, key_owner in (
                ("research", "research"),
                ("research", "search"),
                ("search", "search"),
            ):
                keys = {"dynamodb:LeadingKeys": [f"trainstack-{key_owner}"]}
                calls.append(
                    Call(
                        f"{machine} {action} {table_owner}/{key_owner}",
                        role,
                        action,
                        table(table_owner),
                        keys,
                    )
                )
    release = teams.role("research", "TrainingBudgetReleaseStateMachineRole")
    for owner in ("research", "search"):
        execution = (
            f"arn:aws:states:{teams.region}:{teams.account}:execution:trainstack-{owner}-pipeline:run-1"
        )
        calls.append(Call(f"describe {owner}'s run", release, "states:DescribeExecution", execution))
    allowed = decisions(calls)
    assert [caller for caller, ok in allowed.items() if ok] == [
        "TrainingStateMachineRole dynamodb:UpdateItem research/research",
        "TrainingStateMachineRole dynamodb:GetItem research/research",
        "TrainingBudgetReleaseStateMachineRole dynamodb:UpdateItem research/research",
        "TrainingBudgetReleaseStateMachineRole dynamodb:GetItem research/research",
        "describe research's run",
    ]
