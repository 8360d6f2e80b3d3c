"""Retrain on new data per team (config/examples/teams.yaml: both teams set `retrain_on_new_data`): each
team's synthesized trigger rule, trigger machine, state table and pipeline in the emulator on the stepped
clock, with one FakeBatch queue and one FakeSageMaker for both. Uploads under research's dataset prefix start
exactly one run of research's pipeline and none of search's; search's uploads start search's own."""

from __future__ import annotations

import json
from typing import Any

import pytest

from localaws.demo.synthesized import create_tables
from localaws.demo.trigger_world import TriggerMachines, TriggerRoute, trigger_world
from localaws.emulator.fake_fsx import FakeFsx
from localaws.sagemaker import COMPLETED, STARTING, TRAINING, evaluated, scripted_sagemaker
from tests.infra.templates import resources
from tests.pipeline.conftest import FAKE_VALUES, state_machines
from tests.queue.test_queue_pipeline import filled, install_queue
from trainstack.pipeline_runs import shared_queue
from trainstack.teams import namespace
from trainstack.trigger_settings import trigger_machine_name, trigger_table_name

TEAMS = ("research", "search")
MINUTE = 60
BUCKET = FAKE_VALUES["DatasetBucket"]


def route_of(project: str, team: str, template: dict[str, Any]) -> TriggerRoute:
    """The team's trigger as its stack deploys it: the rule's pattern names the (local) dataset bucket."""
    [rule] = [
        body["Properties"]["EventPattern"]
        for body in resources(template, "AWS::Events::Rule").values()
        if body["Properties"].get("EventPattern", {}).get("source") == ["aws.s3"]
    ]
    rule["detail"]["bucket"]["name"] = [BUCKET]  # a deploy-time value (the storage stack's output)
    own = namespace(project, team)
    return TriggerRoute(trigger_machine_name(own), f"{own}-pipeline", rule, trigger_table_name(own))


@pytest.fixture(scope="module")
def machines(teams_app) -> TriggerMachines:
    settings, stacks, assembly = teams_app
    definitions, routes = {}, []
    for stack, team in zip(stacks.pipelines, TEAMS, strict=True):
        template = assembly.get_stack_by_name(stack.stack_name).template
        definitions.update({name: filled(body, template) for name, body in state_machines(template).items()})
        routes.append(route_of(settings.project, team, template))
    return TriggerMachines(
        definitions=definitions,
        routes=tuple(routes),
        bucket=BUCKET,
        settings=settings,
        image_uri=FAKE_VALUES["TrainingImageUri"],
    )


@pytest.fixture
def world(teams_app, machines, monkeypatch):
    settings, stacks, assembly = teams_app
    # The file system links the whole dataset prefix (every team's directory under it), as the storage stack.
    fsx = FakeFsx({FAKE_VALUES["FileSystemId"]: (f"s3://{BUCKET}/{settings.dataset.prefix}",)})
    sagemaker = scripted_sagemaker([[STARTING, TRAINING, COMPLETED]], evaluation_script=evaluated(2.0))
    with trigger_world(machines, sagemaker, fsx, monkeypatch) as world:
        batch = install_queue(shared_queue(settings), sagemaker, world.clock, monkeypatch)
        for stack in assembly.stacks:  # the run-name table, each team's budget table
            create_tables(stack.template, "us-east-1")
        yield world, batch


def upload(world, prefix: str, count: int) -> None:
    for index in range(count):
        world.upload(f"{prefix}shard-{index:03d}.bin", f"{prefix}{index}".encode())
        world.advance(MINUTE)
    world.run_until_idle()


def test_a_teams_uploads_start_exactly_one_run_of_its_own_pipeline_and_none_of_the_others(world, machines):
    world, batch = world
    research, search = machines.routes
    teams = {team.name: team for team in machines.settings.teams}
    upload(world, teams["research"].retrain_on_new_data.prefix, 3)
    [run] = world.runs(research)
    assert run["status"] == "SUCCEEDED", run
    assert json.loads(run["input"]) == {"profile": "small-torchrun", "runName": run["name"]}
    assert run["name"].startswith("trainstack-research-data-")
    assert world.runs(search) == [] and world.triggers(search) == [] and world.item(search) == {}
    # Through research's own pipeline: its share in the queue (and so its caps and budgets).
    shares = [call["shareIdentifier"] for op, call in batch.calls if op == "SubmitServiceJob"]
    assert shares and set(shares) == {"research"}

    upload(world, teams["search"].retrain_on_new_data.prefix, 2)
    [search_run] = world.runs(search)
    assert search_run["status"] == "SUCCEEDED" and search_run["name"].startswith("trainstack-search-data-")
    assert len(world.runs(research)) == 1, "search's uploads start no run of research's"
    # Each team's trigger state in its own table, under its own profile's item.
    assert json.loads(world.item(search)["small-torchrun"]["lastDecision"]["S"])["decision"] == "trained"
    assert world.item(research)["small-torchrun"]["lastHashRun"] == {"S": run["name"]}
