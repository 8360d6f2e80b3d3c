"""Team budgets across runs (teams[].budget, docs/teams.md "Budgets across runs"), run as team research
(A) against team search (B), in the emulator on a SteppedClock (tests/teams/many_runs.py's world):

- queue mode (config/examples/teams.yaml as shipped: research may have 4 runs live, and refuses more):
  research's fifth run is refused InvalidInput, naming the budget, the team's use and when it frees,
  before any job, while search's run starts and succeeds; each ending releases its reservation
  (succeeded, failed and stopped through the release rule, a lost ending through the sweep), and the
  month's reserved cost is trued up with what the runs billed; a run over the month's budget is refused
  with the figures.
- direct mode (the same teams without the queue, research holding 1 run at a time with on_budget: wait):
  research's second run waits while search's run starts and succeeds, and proceeds once research's first
  run ended and released its reservation.
"""

from __future__ import annotations

import json
import uuid

import boto3
import pytest
import yaml

from localaws.sagemaker.scripted import BILLED_TRAINING
from tests.conftest import TEAMS_CONFIG, synthesize
from tests.pipeline import harness
from tests.pipeline.test_fault_drills import USER_CONFIG
from tests.queue.test_queue_pipeline import ended_event
from tests.teams.many_runs import (
    CLOCK_LIMIT_SECONDS,
    NEVER_ENDS,
    SUCCESS,
    Run,
    Scenario,
    described,
    leftovers,
    many_runs_world,
    pipeline_arn,
    running_executions,
)
from trainstack.config_loading import parse_settings
from trainstack.job_request import RUN_TAG
from trainstack.team_budgets import budget_table_name

PROFILE = "small-torchrun"
TABLE = budget_table_name("trainstack-research")
STARTING, TRAINING = NEVER_ENDS
COMPLETED = SUCCESS[-1]


def runs(*specs: tuple[str, str, list]) -> list[Run]:
    """(team, key, its job's script) each: the run trainstack-<team>-<key>, execution <key>."""
    return [
        Run(team, f"trainstack-{team}-{key}", key, Scenario(key, [script], ("SUCCEEDED", None)))
        for team, key, script in specs
    ]


def start(run: Run) -> str:
    return _stepfunctions().start_execution(
        stateMachineArn=pipeline_arn(run.team),
        name=run.execution,
        input=json.dumps({"runName": run.name, "profile": PROFILE}),
    )["executionArn"]


def release(event: dict) -> None:
    """research's release machine on `event`: an execution's end (the rule) or the scheduled sweep, under a
    name of its own, as EventBridge starts it."""
    _stepfunctions().start_execution(
        stateMachineArn=f"{pipeline_arn('research').removesuffix('pipeline')}budget-release",
        name=str(uuid.uuid4()),
        input=json.dumps(event),
    )


SWEEP = {"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}


def budget_item() -> dict:
    return (
        boto3.client("dynamodb", region_name=harness.REGION)
        .get_item(TableName=TABLE, Key={"team": {"S": "trainstack-research"}}, ConsistentRead=True)
        .get("Item", {})
    )


def counted(name: str) -> float:
    return float(budget_item().get(name, {"N": "0"})["N"])


def month_usd(item: dict) -> float:
    [value] = [float(value["N"]) for name, value in item.items() if name.startswith("usd:")]
    return value


def reservation(item: dict, arn: str) -> dict:
    """A live run's reservation's figures (instances, plannedUsd, billedUsd once an attempt ended)."""
    return {name: float(value["N"]) for name, value in item[f"run:{arn}"]["M"].items() if "N" in value}


def ended(arn: str) -> bool:
    return described(arn)["status"] != "RUNNING"


def jobs_of(world, run: Run) -> list:
    return [
        job
        for job in list(world.sagemaker.jobs.values())
        if {tag["Key"]: tag["Value"] for tag in job.request.get("Tags", [])}.get(RUN_TAG) == run.name
    ]


def training(world, run: Run) -> bool:
    return any(
        job.current().status == "InProgress" and job.current().secondary == "Training"
        for job in jobs_of(world, run)
    )


def stop(arn: str) -> None:
    _stepfunctions().stop_execution(executionArn=arn, error="Stopped", cause="the test stops it")


def _stepfunctions():
    return boto3.client("stepfunctions", region_name=harness.REGION)


def test_queue_mode_research_at_its_run_budget_is_refused_while_search_starts_and_every_ending_releases(
    teams_app, monkeypatch
):
    settings, stacks, assembly = teams_app
    held = runs(
        ("research", "ok", [STARTING, *[TRAINING] * 4, COMPLETED]),
        ("research", "fails", [STARTING, *[TRAINING] * 4, USER_CONFIG]),
        ("research", "stopped", NEVER_ENDS),
        ("research", "lost", NEVER_ENDS),
    )
    over, other = runs(("research", "fifth", SUCCESS), ("search", "meanwhile", SUCCESS))
    with many_runs_world("queue", settings, stacks, assembly, [*held, over, other], monkeypatch) as world:
        clock = world.clock
        arns = {run: start(run) for run in held}
        clock.run_until(lambda: counted("runs") == len(held), limit_seconds=CLOCK_LIMIT_SECONDS)
        arns[over], arns[other] = start(over), start(other)
        clock.run_until(
            lambda: ended(arns[over]) and training(world, other), limit_seconds=CLOCK_LIMIT_SECONDS
        )

        refused = described(arns[over])
        assert (refused["status"], refused.get("error")) == ("FAILED", "InvalidInput"), refused
        assert refused["cause"].startswith(
            "Run trainstack-research-fifth is over the budget of team research: max_concurrent_runs 4 "
            "(4 runs live). It frees as the team's live runs end (the soonest by 20"
        ), refused["cause"]
        assert jobs_of(world, over) == []
        assert not any(ended(arns[run]) for run in held)  # search's job trains while research is full
        stop(arns[other])

        ok, fails, stopped, lost = held
        clock.run_until(lambda: ended(arns[ok]) and ended(arns[fails]), limit_seconds=CLOCK_LIMIT_SECONDS)
        for run in (stopped, lost):
            stop(arns[run])
        clock.run_until(lambda: ended(arns[stopped]) and ended(arns[lost]), limit_seconds=CLOCK_LIMIT_SECONDS)
        ends = [described(arns[run])["status"] for run in held]
        assert ends == ["SUCCEEDED", "FAILED", "ABORTED", "ABORTED"]
        before = budget_item()
        claims = {run: reservation(before, arns[run]) for run in held}
        assert "billedUsd" in claims[ok] and "billedUsd" in claims[fails]  # recorded after their attempt

        # The release rule: each ending releases its run's share; twice is once.
        for run in (ok, fails, stopped, stopped):
            release(ended_event(arns[run]))
            clock.run_until(lambda: not running_executions(), limit_seconds=CLOCK_LIMIT_SECONDS)
        assert (counted("runs"), counted("instances")) == (1, claims[lost]["instances"])
        # Trued up: the runs that ended through their own states count what they billed; the stopped one
        # keeps its planned cost (its last attempt's bill is not known to the machines).
        charged = (
            claims[ok]["billedUsd"]
            + claims[fails]["billedUsd"]
            + claims[stopped]["plannedUsd"]
            + claims[lost]["plannedUsd"]
        )
        assert month_usd(budget_item()) == pytest.approx(charged)
        assert month_usd(before) == pytest.approx(sum(claim["plannedUsd"] for claim in claims.values()))

        # The lost ending: the sweep finds the run no longer RUNNING and releases it.
        release(SWEEP)
        clock.run_until(lambda: not running_executions(), limit_seconds=CLOCK_LIMIT_SECONDS)
        item = budget_item()
        assert (counted("runs"), counted("instances")) == (0, 0)
        assert [name for name in item if name.startswith("run:")] == []


def test_queue_mode_a_run_over_the_months_budget_is_refused_with_the_figures(teams_app, monkeypatch):
    settings, stacks, assembly = teams_app
    [dear] = runs(("research", "dear", SUCCESS))
    with many_runs_world("queue", settings, stacks, assembly, [dear], monkeypatch) as world:
        month = world.clock.now().strftime("%Y-%m")
        boto3.client("dynamodb", region_name=harness.REGION).put_item(
            TableName=TABLE,
            Item={
                "team": {"S": "trainstack-research"},
                "runs": {"N": "0"},
                "instances": {"N": "0"},
                f"usd:{month}": {"N": "99999.5"},  # what this month's earlier runs spent
            },
        )
        arn = start(dear)
        world.clock.run_until(lambda: ended(arn), limit_seconds=CLOCK_LIMIT_SECONDS)
        refused = described(arn)
        assert (refused["status"], refused.get("error")) == ("FAILED", "InvalidInput"), refused
        year, number = map(int, month.split("-"))
        renews = f"{year + 1}-01-01" if number == 12 else f"{year}-{number + 1:02d}-01"
        assert refused["cause"].startswith(
            "Run trainstack-research-dear is over the budget of team research: monthly_usd $100,000.00 "
            f"($99,999.50 reserved in {month}, this run plans $"
        ), refused["cause"]
        assert refused["cause"].endswith(
            f"It frees as the team's live runs end, and the month's budget renews on {renews}; start it "
            "then, or ask the platform team to raise the budget."
        ), refused["cause"]
        assert jobs_of(world, dear) == []
        assert counted("runs") == 0


@pytest.fixture(scope="module")
def direct_app(tmp_path_factory):
    """The teams without the queue (and, to synthesize quickly, without FSx, the llama profile and the
    registry), research holding one run at a time and waiting for room: (settings, stacks, assembly)."""
    data = yaml.safe_load(TEAMS_CONFIG.read_text())
    data["queue"] = {"enabled": False}
    data["fsx"] = {"enabled": False}
    [profile] = [profile for profile in data["profiles"] if profile["name"] == PROFILE]
    del profile["registry"]
    data["profiles"] = [profile]
    for team in data["teams"]:
        team["profiles"] = [PROFILE]
    data["teams"][0]["budget"] = {"max_concurrent_runs": 1, "on_budget": "wait"}
    settings = parse_settings(data, {}, source="teams, direct mode, research waits for its budget")
    stacks, assembly = synthesize(settings, tmp_path_factory.mktemp("teams-direct-budget.cdk.out"))
    return settings, stacks, assembly


def test_direct_mode_research_waits_at_its_run_budget_while_search_starts_and_proceeds_after(
    direct_app, monkeypatch
):
    settings, stacks, assembly = direct_app
    first, second, other = runs(
        ("research", "first", [STARTING, *[BILLED_TRAINING] * 6, COMPLETED]),
        ("research", "second", [STARTING, BILLED_TRAINING, BILLED_TRAINING, COMPLETED]),
        ("search", "meanwhile", SUCCESS),
    )
    with many_runs_world("direct", settings, stacks, assembly, [first, second, other], monkeypatch) as world:
        clock = world.clock
        arns = {first: start(first)}
        clock.run_until(lambda: counted("runs") == 1, limit_seconds=CLOCK_LIMIT_SECONDS)
        arns[second], arns[other] = start(second), start(other)
        clock.run_until(lambda: ended(arns[other]), limit_seconds=CLOCK_LIMIT_SECONDS)
        assert described(arns[other])["status"] == "SUCCEEDED"  # search ran while research's second waited
        assert not ended(arns[second]) and jobs_of(world, second) == []
        clock.run_until(lambda: ended(arns[first]), limit_seconds=CLOCK_LIMIT_SECONDS)
        assert described(arns[first])["status"] == "SUCCEEDED"
        first_billed = reservation(budget_item(), arns[first])["billedUsd"]
        assert jobs_of(world, second) == []  # still waiting: the first run's share is not released yet
        release(ended_event(arns[first]))
        clock.run_until(lambda: ended(arns[second]), limit_seconds=CLOCK_LIMIT_SECONDS)
        assert described(arns[second])["status"] == "SUCCEEDED", described(arns[second])
        claim = reservation(budget_item(), arns[second])
        assert 0 < claim["billedUsd"] < claim["plannedUsd"]
        release(ended_event(arns[second]))
        clock.run_until(lambda: not running_executions(), limit_seconds=CLOCK_LIMIT_SECONDS)
        assert leftovers(world, {}) == []
        # Both runs' planned cost was reserved, and trued up with what each billed.
        assert month_usd(budget_item()) == pytest.approx(first_billed + claim["billedUsd"])
