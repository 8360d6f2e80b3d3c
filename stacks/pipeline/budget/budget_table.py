"""A team's budget table (trainstack/team_budgets.py): one DynamoDB item, keyed by the team's namespace,
holding what the team's live runs reserved.

The item's attributes:
- `runs`, `instances`: the live runs and the instances they asked for;
- `usd:<YYYY-MM>`: the planned cost reserved in that month (UTC, by each run's start), trued up with the
  billed cost as runs end;
- `run:<execution ARN>`: one live run's reservation, a map {instances, plannedUsd, month, endsAt, and
  billedUsd once an attempt has ended}.

One item, so a reservation is one conditional UpdateItem: DynamoDB applies an update and its condition
atomically ("Condition expressions", DynamoDB developer guide), so two runs of a team starting at once
never both take the last place. The item holds a reservation a few hundred bytes long per live run, far
below DynamoDB's 400 KB item limit for any budget a team would set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.pipeline.claim_tables import claim_table
from stacks.pipeline.trigger.trigger_calls import dynamodb_call
from trainstack.team_budgets import TeamBudget, budget_table_name

TEAM_KEY = "team"
RUN_PREFIX = "run:"  # a live run's reservation: `run:<execution ARN>`
MONTH_PREFIX = "usd:"  # a month's reserved cost: `usd:<YYYY-MM>`
# The attribute names of the reservation's expressions (DynamoDB reserves many words: names, not words).
NAMES = {"#runs": "runs", "#instances": "instances"}


@dataclass(frozen=True)
class BudgetTable:
    """The team's budget table, its one item's key, and the budget it enforces."""

    name: str
    arn: str
    namespace: str
    team: str
    budget: TeamBudget

    def call(
        self, scope: Construct, state_id: str, action: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tasks.CallAwsService:
        """A DynamoDB call on the team's item (`action`: getItem or updateItem), retried when throttled."""
        return dynamodb_call(
            scope,
            state_id,
            action,
            table_name=self.name,
            table_arn=self.arn,
            parameters={"Key": {TEAM_KEY: {"S": self.namespace}}, **parameters},
            **kwargs,
        )

    def only_own_item(self, role: iam.IRole) -> None:
        """`role` reads and writes only the team's own item (dynamodb:LeadingKeys: DynamoDB developer guide,
        "Using IAM policy conditions for fine-grained access control"). The table is the team's own too:
        this keeps a definition edited by hand from writing budgets it does not own."""
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="OnlyOwnBudget",
                effect=iam.Effect.DENY,
                actions=["dynamodb:GetItem", "dynamodb:UpdateItem"],
                resources=[self.arn],
                conditions={"ForAnyValue:StringNotEquals": {"dynamodb:LeadingKeys": [self.namespace]}},
            )
        )


def budget_table(scope: Construct, namespace: str, team: str, budget: TeamBudget) -> BudgetTable:
    """The table `<namespace>-budget`, kept on stack deletion like the run names: a month's spend outlives a
    redeploy."""
    name = budget_table_name(namespace)
    table = claim_table(
        scope,
        "BudgetTable",
        name=name,
        key=TEAM_KEY,
        removal=cdk.RemovalPolicy.RETAIN,
        holds="A team's reservations and monthly spend",
    )
    # The literal name in the definitions (no reference for the emulator and the IAM tests to resolve).
    return BudgetTable(name, table.table_arn, namespace, team, budget)
