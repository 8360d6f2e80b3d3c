"""The pipeline's side of a team's budget (budget_table.py): reserve the run's share before its first
attempt, record its billed cost after each attempt. The release is budget_release.py's.

Reserve: make sure the team's counters exist (an unconditional UpdateItem with if_not_exists), then one
UpdateItem that adds the run (its reservation, 1 run, its instances, its planned cost in the month) only
if every budget still has room: `#runs < max_concurrent_runs`, `#instances <= max_instances_in_use -
this run's`, `#month <= monthly_usd - this run's planned cost`. Refused (ConditionalCheckFailed): read the
item; a reservation of this very execution (a retried call that had succeeded, a redrive) counts as
reserved; otherwise with `on_budget: wait` the run waits BUDGET_POLL_SECONDS and asks again while that
ends before its retry deadline, and else it fails InvalidInput naming each budget it would exceed, the
team's use, and when it frees.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.pipeline.budget.budget_table import MONTH_PREFIX, NAMES, RUN_PREFIX, BudgetTable
from stacks.pipeline.cost_cap_states import PLANNED_USD, money
from stacks.pipeline.jsonata_text import expression, literal
from stacks.pipeline.state_machine_facts import ERROR_INVALID_INPUT
from stacks.pipeline.trigger.trigger_calls import CONDITION_FAILED, number, text
from trainstack.team_budgets import BUDGET_POLL_SECONDS

RUN_ATTRIBUTE = f'"{RUN_PREFIX}" & $states.context.Execution.Id'
MONTH = "$substring($states.context.Execution.StartTime, 0, 7)"
MONTH_ATTRIBUTE = f'"{MONTH_PREFIX}" & {MONTH}'


def prepare_run_assign() -> dict[str, str]:
    """PrepareRun's `$budgetClaim`, from `$checked`: the instances the run asks for (its instanceCount, else
    the profile's largest preference) and its planned cost (0 where the region has no prices)."""
    claim = (
        "($p := $checked.profile; $in := $checked.input; "
        '{"instances": $exists($in.instanceCount) ? $in.instanceCount '
        ": $exists($p.costCap) ? $max($p.costCap.hourly.instanceCount) "
        ": $p.request.ResourceConfig.InstanceCount, "
        f'"plannedUsd": ($exists($p.costCap) and $count($p.costCap.rates) > 0) ? {PLANNED_USD} : 0}})'
    )
    return {"budgetClaim": expression(claim)}


def reserve_budget(scope: Construct, table: BudgetTable, reserved: sfn.IChainable) -> sfn.IChainable:
    """The states that reserve the run's share, then `reserved`."""
    names = {**NAMES, "#month": expression(MONTH_ATTRIBUTE)}
    open_counters = table.call(
        scope,
        "OpenBudgetCounters",
        "updateItem",
        {
            "UpdateExpression": "SET #runs = if_not_exists(#runs, :zero), "
            "#instances = if_not_exists(#instances, :zero), #month = if_not_exists(#month, :zero)",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": {":zero": {"N": "0"}},
        },
        comment="The team's counters and this month's, at 0 where they do not exist yet.",
    )
    reserve = _reserve(scope, table, names)
    read = table.call(
        scope,
        "ReadBudgetUse",
        "getItem",
        {"ConsistentRead": True},
        assign={"budgetUse": expression("$states.result.Item")},
    )
    reserve.add_catch(read, errors=[CONDITION_FAILED])
    over_budget = sfn.Fail.jsonata(
        scope, "OverBudget", error=ERROR_INVALID_INPUT, cause=expression(_over_budget_cause(table))
    )
    refused = sfn.Choice.jsonata(scope, "IsBudgetReserved").when(
        sfn.Condition.jsonata(expression(f"$exists($lookup($budgetUse, {RUN_ATTRIBUTE}))")), reserved
    )
    if table.budget.on_budget == "wait":
        wait = sfn.Wait.jsonata(
            scope,
            "WaitForBudget",
            comment="on_budget: wait: ask again once another run may have ended.",
            time=sfn.WaitTime.duration(Duration.seconds(BUDGET_POLL_SECONDS)),
        )
        refused.when(
            sfn.Condition.jsonata(
                expression(f"$millis() + {BUDGET_POLL_SECONDS * 1000} <= $plan.deadlineMillis")
            ),
            wait.next(reserve),
        )
    refused.otherwise(over_budget)
    open_counters.next(reserve).next(reserved)
    read.next(refused)
    return open_counters


def _reserve(scope: Construct, table: BudgetTable, names: dict[str, str]) -> sfn.TaskStateBase:
    """The one conditional UpdateItem that adds the run's share if every limit of the budget has room."""
    budget = table.budget
    conditions = ["attribute_not_exists(#run)"]
    values = {
        ":claim": {
            "M": {
                "instances": number("$budgetClaim.instances"),
                "plannedUsd": number("$budgetClaim.plannedUsd"),
                "month": text(MONTH),
                "endsAt": text("$fromMillis($plan.stopAtMillis)"),
            }
        },
        ":one": {"N": "1"},
        ":instances": number("$budgetClaim.instances"),
        ":usd": number("$budgetClaim.plannedUsd"),
    }
    if budget.max_concurrent_runs is not None:
        conditions.append("#runs < :maxRuns")
        values[":maxRuns"] = {"N": str(budget.max_concurrent_runs)}
    if budget.max_instances_in_use is not None:
        conditions.append("#instances <= :instanceRoom")
        values[":instanceRoom"] = number(f"{budget.max_instances_in_use} - $budgetClaim.instances")
    if budget.monthly_usd is not None:
        conditions.append("#month <= :usdRoom")
        values[":usdRoom"] = number(f"{budget.monthly_usd} - $budgetClaim.plannedUsd")
    return table.call(
        scope,
        "ReserveBudget",
        "updateItem",
        {
            "UpdateExpression": "SET #run = :claim ADD #runs :one, #instances :instances, #month :usd",
            "ConditionExpression": " AND ".join(conditions),
            "ExpressionAttributeNames": {**names, "#run": expression(RUN_ATTRIBUTE)},
            "ExpressionAttributeValues": values,
        },
        comment="This run's share, only if every budget of the team has room for it.",
    )


def record_billed_cost(scope: Construct, table: BudgetTable) -> sfn.TaskStateBase:
    """After each attempt: the run's billed cost so far on its reservation, for the month's true-up at its
    end. A side effect: a failed write never changes the run's outcome (the release then keeps the planned
    cost)."""
    return table.call(
        scope,
        "RecordBilledCost",
        "updateItem",
        {
            "UpdateExpression": "SET #run.#billed = :billed",
            "ConditionExpression": "attribute_exists(#run)",
            "ExpressionAttributeNames": {"#run": expression(RUN_ATTRIBUTE), "#billed": "billedUsd"},
            "ExpressionAttributeValues": {":billed": number("$spentUsd")},
        },
    )


def _over_budget_cause(table: BudgetTable) -> str:
    """JSONata: the refusal, from `$budgetUse` (the item) and `$budgetClaim`: each budget the run would
    exceed with the team's use, and when it frees."""
    budget = table.budget
    team = table.team
    month = f"$lookup($budgetUse, {MONTH_ATTRIBUTE})"
    problems = []
    if budget.max_concurrent_runs is not None:
        problems.append(
            f"$runs >= {budget.max_concurrent_runs} ? "
            f'"max_concurrent_runs {budget.max_concurrent_runs} (" & $string($runs) & " runs live)"'
        )
    if budget.max_instances_in_use is not None:
        problems.append(
            f"$inUse + $budgetClaim.instances > {budget.max_instances_in_use} ? "
            f'"max_instances_in_use {budget.max_instances_in_use} (" & $string($inUse) & " in use, this run '
            'asks for " & $string($budgetClaim.instances) & ")"'
        )
    if budget.monthly_usd is not None:
        problems.append(
            f"$spent + $budgetClaim.plannedUsd > {budget.monthly_usd} ? "
            f'"monthly_usd " & {money(str(budget.monthly_usd))} & " (" & {money("$spent")} & " reserved in " '
            f'& {MONTH} & ", this run plans " & {money("$budgetClaim.plannedUsd")} & ")"'
        )
    next_month = (
        f"($y := $number($substring({MONTH}, 0, 4)); $m := $number($substring({MONTH}, 5, 2)); "
        '$m = 12 ? $string($y + 1) & "-01-01" : $string($y) & "-" & $formatInteger($m + 1, "00") & "-01")'
    )
    return (
        "($runs := $number($budgetUse.runs.N); $inUse := $number($budgetUse.instances.N); "
        f"$spent := $number({month}.N); "
        f"$ends := $sort($each($budgetUse, function($v, $k) {{$substring($k, 0, {len(RUN_PREFIX)}) = "
        f'"{RUN_PREFIX}" ? $v.M.endsAt.S}})); '
        f"$problems := [{', '.join(problems)}]; "
        f'"Run " & $plan.runName & " is over the budget of team {team}: " & $join($problems, "; ") & ". '
        "It frees as the team's live runs end"
        f'" & ($count($ends) > 0 ? " (the soonest by " & $ends[0] & ")" : "") & '
        + (
            f'", and the month\'s budget renews on " & {next_month} & '
            if budget.monthly_usd is not None
            else ""
        )
        + (
            literal("; it waited for room until its retry deadline.")
            if budget.on_budget == "wait"
            else literal("; start it then, or ask the platform team to raise the budget.")
        )
        + ")"
    )
