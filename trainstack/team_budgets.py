"""A team's budget across its runs (the `budget:` of a team; docs/teams.md, "Budgets across runs").

The team's `max_instances`, `max_runtime_hours` and `max_cost_usd` cap each run. A budget caps what the
team holds at once and what it spends in a calendar month, over all of its runs:

- `max_concurrent_runs`: runs live at once (started and not yet ended);
- `max_instances_in_use`: instances the live runs may hold at once (each run counts the instances it
  asked for: its `instanceCount`, else its profile's largest preference);
- `monthly_usd`: planned cost reserved in a calendar month (UTC, by the run's start), trued up with the
  billed cost when the run ends;
- `on_budget`: what a run that would exceed one of them does: `refuse` (the run fails `InvalidInput`,
  naming the budget, the team's use and when it frees) or `wait` (it waits, polling, until it fits or
  its retry deadline passes).

The pipeline reserves the run's share atomically before any job (stacks/pipeline/budget/) and releases it
on every ending.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from trainstack.base import StrictModel

# How often a waiting run asks again (on_budget: wait).
BUDGET_POLL_SECONDS = 300


class TeamBudget(StrictModel):
    max_concurrent_runs: Annotated[int, Field(ge=1, le=1000)] | None = None
    max_instances_in_use: Annotated[int, Field(ge=1, le=100_000)] | None = None
    monthly_usd: Annotated[float, Field(gt=0)] | None = None
    on_budget: Literal["refuse", "wait"] = "refuse"

    @model_validator(mode="after")
    def _bounds_something(self) -> TeamBudget:
        if (self.max_concurrent_runs, self.max_instances_in_use, self.monthly_usd) == (None, None, None):
            raise ValueError(
                "budget: give max_concurrent_runs, max_instances_in_use or monthly_usd, or leave budget out"
            )
        return self


def budget_summary(budget: TeamBudget, max_instances: int) -> str:
    """check-config's line on a team's budget, saying what a max_instances_in_use below the team's per-run
    max_instances means."""
    limits = [
        f"{budget.max_concurrent_runs} runs" if budget.max_concurrent_runs is not None else None,
        f"{budget.max_instances_in_use} instances" if budget.max_instances_in_use is not None else None,
    ]
    at_once = " and ".join(filter(None, limits))
    parts = [f"at most {at_once} at once" if at_once else None]
    if budget.monthly_usd is not None:
        parts.append(f"${budget.monthly_usd:,.2f} of planned cost a month")
    text = f"budget over all runs: {', '.join(filter(None, parts))}; a run over it "
    text += "waits for room until its retry deadline" if budget.on_budget == "wait" else "is refused"
    if budget.max_instances_in_use is not None and budget.max_instances_in_use < max_instances:
        text += (
            f" (max_instances_in_use {budget.max_instances_in_use} is below the per-run max_instances "
            f"{max_instances}: a run asking for more than {budget.max_instances_in_use} is refused at its "
            "start)"
        )
    return text


def budget_table_name(namespace: str) -> str:
    """The team's DynamoDB table of reservations (one item, keyed by the namespace)."""
    return f"{namespace}-budget"


def check_team_budget(
    where: str, budget: TeamBudget, max_cost_usd: float, profile_instances: dict[str, int]
) -> None:
    """A budget that some run of the team could never fit in is refused in one sentence. A
    max_instances_in_use below the team's per-run max_instances is allowed: it is what binds, and a run
    asking for more instances than it holds is refused at its start (with `wait`, it waits out its retry
    deadline and is refused). `profile_instances`: each of the team's profiles' largest instance count."""
    if budget.monthly_usd is not None and max_cost_usd > budget.monthly_usd:
        raise ValueError(
            f"{where}.budget.monthly_usd ({budget.monthly_usd:g}) is below the team's per-run max_cost_usd "
            f"({max_cost_usd:g}): one run could plan more than the month's budget; lower max_cost_usd or "
            "raise monthly_usd"
        )
    for profile, count in profile_instances.items():
        if budget.max_instances_in_use is not None and count > budget.max_instances_in_use:
            raise ValueError(
                f"{where}.budget.max_instances_in_use ({budget.max_instances_in_use}) is below the "
                f"{count} instances of profile {profile}: its runs could never start; raise it or remove "
                "the profile"
            )
