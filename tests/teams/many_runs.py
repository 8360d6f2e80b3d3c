"""Many runs of two teams at once (config/examples/teams.yaml), in either mode: each team's synthesized
machines in the emulator on a SteppedClock against one scripted SageMaker (and, in queue mode, the shared
FakeBatch queue), every run scripted by its own name with a fault, then every end checked and every
leftover looked for: a job still running, a Batch job still active, a registration lease still held, a
run-name claim of a run that submitted nothing, a budget reservation not released (each run's end starts its
team's budget release, as the release rule does), an execution still RUNNING.

tests/teams/test_many_runs.py runs a dozen in `make test`; benchmarks/many_runs.py forty and more.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import yaml
from moto import mock_aws

from localaws.demo.synthesized import create_tables
from localaws.emulator import SteppedClock, local_stepfunctions
from localaws.sagemaker import (
    CAPACITY_FAILURE,
    COMPLETED,
    STARTING,
    TRAINING,
    FakeSageMaker,
    Phase,
    ScriptedJobs,
    evaluated,
    install_fake_sagemaker,
)
from localaws.sagemaker.calls import CallControl
from localaws.sagemaker.scripted import ScriptedRun, evaluates
from tests.conftest import TEAMS_CONFIG, synthesize
from tests.pipeline import harness
from tests.pipeline.conftest import FAKE_VALUES, deploy_registry_resources, state_machines
from tests.pipeline.test_fault_drills import HANG, INTERNAL, USER_CONFIG
from tests.queue.test_queue_pipeline import ended_event, filled, install_queue
from trainstack.config_loading import parse_settings
from trainstack.job_request import RUN_TAG
from trainstack.pipeline_runs import shared_queue
from trainstack.team_budgets import budget_table_name

TEAMS = ("research", "search")
PROFILE = "small-torchrun"  # both teams' profile; its registry registers each run that completes
SUCCESS = [STARTING, TRAINING, COMPLETED]
NEVER_ENDS = [STARTING, TRAINING]  # the last phase repeats: a job that trains until it is stopped
ACTIVE_BATCH_STATUSES = ("SUBMITTED", "PENDING", "RUNNABLE", "SCHEDULED", "STARTING", "RUNNING")
CLOCK_LIMIT_SECONDS = 14 * 86_400


@dataclass(frozen=True)
class Scenario:
    """What one run meets and how it must end."""

    name: str
    job_scripts: list[list[Phase]]  # its training jobs', in order (the last repeats)
    ends: tuple[str, str | None]  # (status, error)
    execution_input: dict[str, Any] = field(default_factory=dict)  # beside runName and profile
    stopped: bool = False  # the test stops it once its job trains


SCENARIOS = (
    Scenario("ok", [SUCCESS], ("SUCCEEDED", None)),
    Scenario("capacity", [[STARTING, CAPACITY_FAILURE], SUCCESS], ("SUCCEEDED", None)),
    Scenario("internal", [[STARTING, INTERNAL], SUCCESS], ("SUCCEEDED", None)),
    Scenario("hang", [[STARTING, TRAINING, HANG], SUCCESS], ("SUCCEEDED", None)),
    Scenario("user-error", [[STARTING, USER_CONFIG]], ("FAILED", "TrainingFailed")),
    Scenario("bad-input", [SUCCESS], ("FAILED", "InvalidInput"), {"instanceCount": 0}),
    Scenario("stop", [NEVER_ENDS], ("ABORTED", None), stopped=True),
    # Two executions of one run name started together: one runs, the other is refused (checked apart).
    Scenario("duplicate", [SUCCESS], ("SUCCEEDED", None)),
)


@dataclass(frozen=True, eq=False)  # each run is itself (a duplicate pair shares every field but one)
class Run:
    team: str
    name: str  # the run name
    execution: str  # the execution's name
    scenario: Scenario


def runs_of(count: int) -> list[Run]:
    """`count` runs, the scenarios taken in turn and the teams alternating (the team that starts a round of
    scenarios alternates too, so each team meets each scenario); each duplicate scenario adds a second
    execution of the same run name."""
    runs = []
    for index in range(count):
        scenario = SCENARIOS[index % len(SCENARIOS)]
        team = TEAMS[(index + index // len(SCENARIOS)) % len(TEAMS)]
        name = f"trainstack-{team}-{scenario.name}-{index}"
        runs.append(Run(team, name, f"run-{index}", scenario))
        if scenario.name == "duplicate":
            runs.append(Run(team, name, f"run-{index}-again", scenario))
    return runs


@dataclass
class ScriptedByRun(ScriptedJobs):
    """Each run's training jobs follow its scenario's scripts (by the job's run tag); evaluation jobs
    complete with loss 2.0."""

    by_run: dict[str, list[list[Phase]]] = field(default_factory=dict)
    jobs_of_run: Counter = field(default_factory=Counter)

    def start(self, job) -> ScriptedRun:
        if evaluates(job):
            return ScriptedRun(evaluated(2.0))
        run = {tag["Key"]: tag["Value"] for tag in job.request.get("Tags", [])}[RUN_TAG]
        scripts = self.by_run[run]
        index = self.jobs_of_run[run]
        self.jobs_of_run[run] += 1
        return ScriptedRun(list(scripts[min(index, len(scripts) - 1)]))


def teams_settings(mode: str):
    """config/examples/teams.yaml in `mode`: as shipped ("queue") or with the queue off ("direct"), for the
    benchmark's dozens of runs at once without the teams' budgets, which would refuse most of them
    (tests/teams/test_team_budgets.py tests those)."""
    data = yaml.safe_load(TEAMS_CONFIG.read_text())
    if mode == "direct":
        data["queue"] = {"enabled": False}
    for team in data["teams"]:
        team.pop("budget", None)
    return parse_settings(data, {}, source=f"{TEAMS_CONFIG} ({mode})")


def synthesized(mode: str, outdir: Path):
    """(settings, stacks, assembly) of the teams app in `mode`."""
    settings = teams_settings(mode)
    stacks, assembly = synthesize(settings, outdir)
    return settings, stacks, assembly


def definitions_of(stacks, assembly) -> dict[str, str]:
    """Both teams' state machines, by name, filled as deployed (each team's own FSx directory)."""
    found = {}
    for stack in stacks.pipelines:
        template = assembly.get_stack_by_name(stack.stack_name).template
        team = stack.stack_name.split("-")[1]
        directory = FAKE_VALUES["CheckpointDirectoryPath"].removesuffix("/all") + f"/{team}"
        for name, properties in state_machines(template).items():
            found[name] = filled(properties, template).replace(
                FAKE_VALUES["CheckpointDirectoryPath"], directory
            )
    return found


@dataclass
class World:
    mode: str
    clock: SteppedClock
    sagemaker: FakeSageMaker
    batch: Any  # FakeBatch in queue mode, else None
    tables: list[str]  # the DynamoDB tables the stacks declare (leases, run names)

    def cleanup_machine(self, team: str) -> str:
        name = "queue-cleanup" if self.batch is not None else "job-cleanup"
        return f"arn:aws:states:{harness.REGION}:{harness.ACCOUNT}:stateMachine:trainstack-{team}-{name}"

    def budget_release_machine(self, team: str) -> str | None:
        """The team's budget release machine, where the team has a budget (stacks/pipeline/budget/)."""
        if budget_table_name(f"trainstack-{team}") not in self.tables:
            return None
        return (
            f"arn:aws:states:{harness.REGION}:{harness.ACCOUNT}:stateMachine:trainstack-{team}-budget-release"
        )


@contextmanager
def many_runs_world(mode: str, settings, stacks, assembly, runs: list[Run], monkeypatch) -> Iterator[World]:
    for variable, value in {
        "AWS_DEFAULT_REGION": harness.REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "MOTO_ACCOUNT_ID": harness.ACCOUNT,
    }.items():
        monkeypatch.setenv(variable, value)
    clock = SteppedClock()
    behaviour = ScriptedByRun(by_run={run.name: run.scenario.job_scripts for run in runs})
    # Throttling in direct mode: the first calls of each kind the pipelines make are refused, whoever makes
    # them (in queue mode Batch calls SageMaker, not the machines).
    throttles = {"CreateTrainingJob": 3, "DescribeTrainingJob": 6} if mode == "direct" else {}
    sagemaker = FakeSageMaker(behaviour=behaviour, control=CallControl(throttles=throttles), now=clock.time)
    install_fake_sagemaker(sagemaker, monkeypatch)
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}), local_stepfunctions(clock):
        deploy_registry_resources(settings)
        batch = (
            install_queue(shared_queue(settings), sagemaker, clock, monkeypatch) if mode == "queue" else None
        )
        tables = []
        for stack in assembly.stacks:
            create_tables(stack.template, harness.REGION)
            tables += [
                body["Properties"]["TableName"]
                for body in stack.template.get("Resources", {}).values()
                if body["Type"] == "AWS::DynamoDB::Table"
            ]
        for name, definition in definitions_of(stacks, assembly).items():
            harness.create_state_machine(definition, name)
        yield World(mode, clock, sagemaker, batch, tables)
        _stop_all_running()


def _stop_all_running() -> None:
    """Leave no thread running into a later session (docs/emulator.md)."""
    client = boto3.client("stepfunctions", region_name=harness.REGION)
    for machine in client.list_state_machines()["stateMachines"]:
        for execution in client.list_executions(
            stateMachineArn=machine["stateMachineArn"], statusFilter="RUNNING"
        )["executions"]:
            client.stop_execution(executionArn=execution["executionArn"])


def pipeline_arn(team: str) -> str:
    return f"arn:aws:states:{harness.REGION}:{harness.ACCOUNT}:stateMachine:trainstack-{team}-pipeline"


def described(execution_arn: str) -> dict[str, Any]:
    return boto3.client("stepfunctions", region_name=harness.REGION).describe_execution(
        executionArn=execution_arn
    )


def running_executions() -> list[str]:
    client = boto3.client("stepfunctions", region_name=harness.REGION)
    return [
        execution["executionArn"]
        for machine in client.list_state_machines()["stateMachines"]
        for execution in client.list_executions(
            stateMachineArn=machine["stateMachineArn"], statusFilter="RUNNING"
        )["executions"]
    ]


def run_all(world: World, runs: list[Run]) -> dict[Run, dict[str, Any]]:
    """Start every run at once, stop the scripted ones once their job trains, let every execution end,
    then run each team's cleanup for every run that ended otherwise than SUCCEEDED, as the cleanup rule
    does, and its budget release for every run, as the release rule does; each run's DescribeExecution
    answer."""
    client = boto3.client("stepfunctions", region_name=harness.REGION)
    arns = {
        run: client.start_execution(
            stateMachineArn=pipeline_arn(run.team),
            name=run.execution,
            input=json.dumps({"runName": run.name, "profile": PROFILE, **run.scenario.execution_input}),
        )["executionArn"]
        for run in runs
    }
    to_stop = [run for run in runs if run.scenario.stopped]

    def training(run: Run) -> bool:
        return any(
            job.current().status == "InProgress" and job.current().secondary == "Training"
            for job in list(world.sagemaker.jobs.values())
            if {tag["Key"]: tag["Value"] for tag in job.request.get("Tags", [])}.get(RUN_TAG) == run.name
        )

    world.clock.run_until(lambda: all(training(run) for run in to_stop), limit_seconds=CLOCK_LIMIT_SECONDS)
    for run in to_stop:
        client.stop_execution(executionArn=arns[run], error="Stopped", cause="the test stops it")
    world.clock.run_until(lambda: not running_executions(), limit_seconds=CLOCK_LIMIT_SECONDS)
    ends = {run: described(arn) for run, arn in arns.items()}
    for run, end in ends.items():
        event = json.dumps(ended_event(end["executionArn"]))
        if end["status"] != "SUCCEEDED":
            client.start_execution(
                stateMachineArn=world.cleanup_machine(run.team), name=f"cleanup-{run.execution}", input=event
            )
        if (release := world.budget_release_machine(run.team)) is not None:
            client.start_execution(stateMachineArn=release, name=f"release-{run.execution}", input=event)
    world.clock.run_until(lambda: not running_executions(), limit_seconds=CLOCK_LIMIT_SECONDS)
    return ends


def attempts_of(team: str, execution_arn: str) -> list[dict[str, Any]]:
    """The attempt executions a pipeline execution started (their input names their parent: the
    attempt task associates them with it, AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID), described."""
    client = boto3.client("stepfunctions", region_name=harness.REGION)
    machine = f"{pipeline_arn(team)}-attempt"
    listed = [
        item["executionArn"]
        for page in client.get_paginator("list_executions").paginate(stateMachineArn=machine)
        for item in page["executions"]
    ]
    return [
        attempt
        for attempt in map(described, listed)
        if json.loads(attempt["input"]).get("AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID") == execution_arn
    ]


def unexpected_ends(ends: dict[Run, dict[str, Any]]) -> list[str]:
    """Each run that did not end as its scenario says (of a duplicate pair: exactly one runs, the other is
    refused InvalidInput before any job); a stopped run's attempt ends ABORTED with it, as on AWS
    (docs/emulator.md, "Races")."""
    wrong = [
        f"{run.name}: attempt {attempt['name']} ended {attempt['status']}, not ABORTED with its run"
        for run in ends
        if run.scenario.stopped
        for attempt in attempts_of(run.team, ends[run]["executionArn"])
        if attempt["status"] != "ABORTED"
    ]
    by_name: dict[str, list[Run]] = {}
    for run in ends:
        by_name.setdefault(run.name, []).append(run)
    for name, pair in by_name.items():
        got = sorted((ends[run]["status"], ends[run].get("error")) for run in pair)
        want = sorted(
            [pair[0].scenario.ends] if len(pair) == 1 else [pair[0].scenario.ends, ("FAILED", "InvalidInput")]
        )
        if got != want:
            wrong.append(f"{name}: {got} (want {want}): {[ends[run].get('cause') for run in pair]}")
    return wrong


def leftovers(world: World, ends: dict[Run, dict[str, Any]]) -> list[str]:
    """Whatever the runs left behind."""
    found = [f"execution still RUNNING: {arn}" for arn in running_executions()]
    found += [
        f"training job {name} still {job.current().status}"
        for name, job in world.sagemaker.jobs.items()
        if job.current().status == "InProgress"
    ]
    if world.batch is not None:
        found += [
            f"service job {job.name} still {job.status}"
            for job in world.batch.jobs.values()
            if job.status in ACTIVE_BATCH_STATUSES
        ]
    dynamodb = boto3.client("dynamodb", region_name=harness.REGION)
    submitted = {
        {tag["Key"]: tag["Value"] for tag in job.request.get("Tags", [])}.get(RUN_TAG)
        for job in world.sagemaker.jobs.values()
    }
    refused = {end["executionArn"] for end in ends.values() if end.get("error") == "InvalidInput"}
    for table in world.tables:
        for item in dynamodb.scan(TableName=table)["Items"]:
            if table.endswith("-budget"):
                found += budget_leftovers(table, item)
            elif table.endswith("-registration-leases"):
                found.append(f"lease still held in {table}: {item}")
            elif item.get("execution", {}).get("S") in refused or item["runName"]["S"] not in submitted:
                found.append(f"claim of a run that submitted nothing in {table}: {item}")
    return found


def budget_leftovers(table: str, item: dict[str, Any]) -> list[str]:
    """A team's budget item once every run has ended: no reservation left, no run or instance counted."""
    found = [f"reservation still held in {table}: {name}" for name in item if name.startswith("run:")]
    found += [
        f"{table}: {counter} still {item[counter]['N']}"
        for counter in ("runs", "instances")
        if item.get(counter, {"N": "0"})["N"] != "0"
    ]
    return found
