"""`make demo-trigger` (python -m localaws.demo.trigger_run): retrain on new data on this machine, no AWS.

The app is synthesized with `retrain_on_new_data` on (profile small-torchrun, prefix <dataset prefix>demo/,
quiet 15 minutes) and its trigger, pipeline, attempt and registration machines run in the local emulator on
a stepped clock (emulated minutes pass in milliseconds); S3, EventBridge, DynamoDB, ECR and the model
registry are moto's, FSx's import tasks and SageMaker's training and evaluation jobs are scripted fakes
(localaws.emulator.fake_fsx, localaws.sagemaker.scripted; every evaluation reports loss 2.0, so a profile
with `registry:` registers each run's model).

1. 20 files land one emulated minute apart: exactly one run starts, 15 quiet minutes after the last;
   3 new files land while it trains: exactly one more run, after it.
2. The same 23 files are uploaded again: no run; the trigger says the dataset is unchanged.

With a `teams:` config each team that runs the profile gets its own trigger on `<dataset.prefix><team>/demo/`:
the steps run for the first team, then 3 files under the second team's prefix start exactly one run of the
second team's pipeline and none of the first's (queue mode: AWS Batch's fake, localaws.emulator.fake_batch).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from localaws.demo.queue_run import synthesize
from localaws.demo.registry_run import decision_line
from localaws.demo.run import say
from localaws.demo.synthesized import SynthesizedPipeline, create_tables, load_pipeline, local_value
from localaws.demo.trigger_world import TriggerMachines, TriggerRoute, TriggerWorld, trigger_world
from localaws.emulator.fake_fsx import FakeFsx, links_in_template
from localaws.sagemaker import evaluated, scripted_sagemaker
from localaws.sagemaker.scripted import COMPLETED, STARTING, TRAINING
from trainstack.config_loading import load_settings
from trainstack.pipeline_runs import all_pipeline_runs, shared_queue
from trainstack.teams import team_dataset_prefix
from trainstack.trigger_settings import RetrainOnNewData, trigger_machine_name, trigger_of, trigger_table_name

MINUTE = 60
FILES, LATE_FILES = 20, 3


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m localaws.demo.trigger_run", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--config", default="config/default.yaml", help="the config to run with the trigger on"
    )
    parser.add_argument("--workdir", default="demo-trigger-run", type=Path, help="emptied first")
    parser.add_argument("--profile", default="small-torchrun", help="the profile new data retrains")
    return parser.parse_args(argv)


def trigger_settings(config: str, profile: str):
    """The config with the trigger on: on `<dataset.prefix>demo/`, or with teams each team that runs
    `profile` on its own `<dataset.prefix><team>/demo/`."""
    settings = load_settings(config)

    def demo_trigger(dataset_prefix: str) -> RetrainOnNewData:
        return RetrainOnNewData(profile=profile, prefix=f"{dataset_prefix}demo/", quiet_minutes=15)

    if not settings.teams:
        return settings.model_copy(update={"retrain_on_new_data": demo_trigger(settings.dataset.prefix)})
    teams = [
        team.model_copy(
            update={
                "retrain_on_new_data": demo_trigger(team_dataset_prefix(settings.dataset.prefix, team.name))
            }
        )
        if profile in team.profiles
        else team
        for team in settings.teams
    ]
    return settings.model_copy(update={"teams": teams})


def route(
    cdk_out: Path, settings, namespace: str
) -> tuple[TriggerRoute, dict[str, str], SynthesizedPipeline]:
    """One pipeline's trigger (`namespace`: the project's, or a team's): its route, its machines' definitions
    (children first) and the pipeline as loaded."""
    project, region = settings.project, settings.region
    pipeline = load_pipeline(cdk_out, project, region, namespace=namespace)
    trigger = load_pipeline(
        cdk_out, project, region, name=trigger_machine_name(namespace), namespace=namespace
    )
    template = json.loads(pipeline.template_path.read_text())
    (pattern,) = [
        body["Properties"]["EventPattern"]
        for body in template["Resources"].values()
        if body["Type"] == "AWS::Events::Rule"
        and body["Properties"].get("EventPattern", {}).get("source") == ["aws.s3"]
    ]
    pattern["detail"]["bucket"]["name"] = [trigger.substitutions["DatasetBucket"]]  # a deploy-time value
    definitions = {
        **pipeline.children,
        **trigger.children,
        pipeline.name: pipeline.definition,
        trigger.name: trigger.definition,
    }
    return (
        TriggerRoute(trigger.name, pipeline.name, pattern, trigger_table_name(namespace)),
        definitions,
        pipeline,
    )


def machines(cdk_out: Path, settings) -> TriggerMachines:
    """Every pipeline with a trigger (without teams, the one)."""
    namespaces = [runs.project for runs in all_pipeline_runs(settings) if trigger_of(settings, runs.team)]
    routes, definitions = [], {}
    for namespace in namespaces:
        each, its_definitions, pipeline = route(cdk_out, settings, namespace)
        routes.append(each)
        definitions.update(its_definitions)
    return TriggerMachines(
        definitions=definitions,
        routes=tuple(routes),
        bucket=local_value("DatasetBucket", settings.project, settings.region),
        settings=settings,
        image_uri=pipeline.substitutions["TrainingImageUri"],
    )


def fake_queue(settings, jobs, clock, monkeypatch, cdk_out: Path) -> None:
    """Queue mode: AWS Batch's fake as the config's (shared) queue, and the run-names table of its stack."""
    from localaws.emulator.batch_routes import install_fake_batch
    from localaws.emulator.fake_batch import FakeBatch
    from stacks.pipeline.queue.training_queue import weight_factor

    queue = shared_queue(settings)
    batch = FakeBatch(
        sagemaker=jobs,
        max_instances=queue.max_instances,
        weight_factors={name: weight_factor(weight) for name, weight in queue.shares.items()},
        capacity_wait_seconds=queue.capacity_wait_seconds,
        now=clock.time,
    )
    install_fake_batch(batch, monkeypatch)
    stack = f"{settings.project}-queue" if settings.teams else f"{settings.project}-pipeline"
    create_tables(json.loads((cdk_out / f"{stack}.template.json").read_text()), settings.region)


def fake_fsx(cdk_out: Path, settings, dataset_bucket: str) -> FakeFsx | None:
    """The FSx task fake with the file system linked as the synthesized storage stack links it."""
    if not settings.fsx_plan:
        return None
    storage = json.loads((cdk_out / f"{settings.project}-storage.template.json").read_text())
    file_system_id = local_value("FileSystemId", settings.project, settings.region)
    buckets = {
        "DatasetBucket": dataset_bucket,
        "CheckpointBucket": local_value("CheckpointBucket", settings.project, settings.region),
    }
    return FakeFsx(links_in_template(storage, buckets=buckets, file_system_id=file_system_id))


def upload(world: TriggerWorld, prefix: str, names: list[str]) -> None:
    for name in names:
        world.upload(f"{prefix}{name}", name.encode())
        world.advance(MINUTE)


def show_runs(world: TriggerWorld, since: int = 0) -> None:
    for run in world.runs()[since:]:
        output = json.loads(run.get("output") or "{}")
        say(
            f"   run {run['name']}: {run['status']}, "
            f"{run['startDate']:%H:%M} -> {run['stopDate']:%H:%M} (emulated)"
            + (f"; registry: {decision_line(output)}" if output else "")
        )


def scenario(world: TriggerWorld, prefix: str) -> list[str]:
    """The demo's steps; the list of what went wrong (empty: every check held)."""
    problems = []
    names = [f"shard-{index:03d}.bin" for index in range(FILES)]
    say(f"1/2 {FILES} files land under {prefix}, one emulated minute apart")
    upload(world, prefix, names)
    world.clock.run_until(
        lambda: any(run["status"] == "RUNNING" for run in world.runs()), limit_seconds=86_400
    )
    late = [f"late-{index:03d}.bin" for index in range(LATE_FILES)]
    say(f"   a run is training; {LATE_FILES} new files land during it")
    upload(world, prefix, late)
    world.run_until_idle()
    show_runs(world)
    if [run["status"] for run in world.runs()] != ["SUCCEEDED", "SUCCEEDED"]:
        problems.append("expected exactly one run for the burst and one more after it for the late files")
    say(f"2/2 the same {FILES + LATE_FILES} files are uploaded again")
    upload(world, prefix, names + late)
    world.run_until_idle()
    show_runs(world, since=2)
    decision = json.loads(world.triggers()[-len(names + late)]["output"] or "{}")
    say(f"   trigger: {decision.get('decision')}: {decision.get('message')}")
    if len(world.runs()) != 2 or decision.get("decision") != "unchanged":
        problems.append("the same files again must start no run and say the dataset is unchanged")
    return problems


def other_team(world: TriggerWorld, prefix: str) -> list[str]:
    """With teams: the first team's uploads started none of the second team's runs; the second team's
    uploads start exactly one of its own, and none of the first team's."""
    first, second = world.machines.routes[:2]
    problems = []
    if world.runs(second):
        problems.append(f"the first team's uploads must start no run of {second.pipeline}")
    say(f"another team: {LATE_FILES} files land under {prefix}")
    before = len(world.runs(first))
    upload(world, prefix, [f"other-{index:03d}.bin" for index in range(LATE_FILES)])
    world.run_until_idle()
    for run in world.runs(second):
        say(f"   run {run['name']}: {run['status']} ({second.pipeline})")
    if [run["status"] for run in world.runs(second)] != ["SUCCEEDED"] or len(world.runs(first)) != before:
        problems.append(f"expected exactly one run of {second.pipeline} and no more of {first.pipeline}")
    return problems


def main(argv: list[str] | None = None) -> int:
    import pytest

    args = parse_args(argv)
    settings = trigger_settings(args.config, args.profile)
    prefixes = [
        trigger.prefix for runs in all_pipeline_runs(settings) if (trigger := trigger_of(settings, runs.team))
    ]
    if not prefixes:
        say(f"FAILED: no team of {args.config} runs profile {args.profile}; name one with --profile")
        return 1
    shutil.rmtree(args.workdir, ignore_errors=True)
    cdk_out = synthesize(settings, args.workdir / "cdk.out")
    say(f"synthesized with retrain_on_new_data on (profile {args.profile}) into {cdk_out}")
    local = machines(cdk_out, settings)
    fsx = fake_fsx(cdk_out, settings, local.bucket)
    jobs = scripted_sagemaker([[STARTING, *[TRAINING] * 8, COMPLETED]], evaluation_script=evaluated(2.0))
    with pytest.MonkeyPatch.context() as monkeypatch, trigger_world(local, jobs, fsx, monkeypatch) as world:
        if settings.queue.enabled:
            fake_queue(settings, jobs, world.clock, monkeypatch, cdk_out)
        problems = scenario(world, prefixes[0])
        if len(prefixes) > 1:
            problems += other_team(world, prefixes[1])
        say(
            f"   FSx import tasks: {len(fsx.tasks) if fsx else 0}; `trainstack triggers` shows the same state"
        )
    for problem in problems:
        say(f"FAILED: {problem}")
    if not problems:
        say(
            "every check held: one run per burst, one more for data that landed during it, "
            "none for the same data"
            + (", and another team's uploads start only that team's run" if len(prefixes) > 1 else "")
        )
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
