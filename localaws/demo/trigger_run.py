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
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from localaws.demo.queue_run import synthesize
from localaws.demo.registry_run import decision_line
from localaws.demo.run import say
from localaws.demo.synthesized import load_pipeline, local_value
from localaws.demo.trigger_world import TriggerMachines, TriggerRoute, TriggerWorld, trigger_world
from localaws.emulator.fake_fsx import FakeFsx, links_in_template
from localaws.sagemaker import evaluated, scripted_sagemaker
from localaws.sagemaker.scripted import COMPLETED, STARTING, TRAINING
from trainstack.config_loading import load_settings
from trainstack.trigger_settings import RetrainOnNewData, trigger_machine_name, trigger_table_name

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
    settings = load_settings(config)
    trigger = RetrainOnNewData(profile=profile, prefix=f"{settings.dataset.prefix}demo/", quiet_minutes=15)
    return settings.model_copy(update={"retrain_on_new_data": trigger})


def machines(cdk_out: Path, settings) -> TriggerMachines:
    project, region = settings.project, settings.region
    pipeline = load_pipeline(cdk_out, project, region)
    trigger = load_pipeline(cdk_out, project, region, name=trigger_machine_name(project))
    template = json.loads(pipeline.template_path.read_text())
    (pattern,) = [
        body["Properties"]["EventPattern"]
        for body in template["Resources"].values()
        if body["Type"] == "AWS::Events::Rule"
        and body["Properties"].get("EventPattern", {}).get("source") == ["aws.s3"]
    ]
    bucket = trigger.substitutions["DatasetBucket"]
    pattern["detail"]["bucket"]["name"] = [bucket]  # a deploy-time value in the template
    return TriggerMachines(
        definitions={
            **pipeline.children,
            **trigger.children,
            pipeline.name: pipeline.definition,
            trigger.name: trigger.definition,
        },
        routes=(TriggerRoute(trigger.name, pipeline.name, pattern, trigger_table_name(project)),),
        bucket=bucket,
        settings=settings,
        image_uri=pipeline.substitutions["TrainingImageUri"],
    )


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


def main(argv: list[str] | None = None) -> int:
    import pytest

    args = parse_args(argv)
    settings = trigger_settings(args.config, args.profile)
    shutil.rmtree(args.workdir, ignore_errors=True)
    cdk_out = synthesize(settings, args.workdir / "cdk.out")
    say(f"synthesized with retrain_on_new_data on (profile {args.profile}) into {cdk_out}")
    local = machines(cdk_out, settings)
    fsx = fake_fsx(cdk_out, settings, local.bucket)
    jobs = scripted_sagemaker([[STARTING, *[TRAINING] * 8, COMPLETED]], evaluation_script=evaluated(2.0))
    with pytest.MonkeyPatch.context() as monkeypatch, trigger_world(local, jobs, fsx, monkeypatch) as world:
        problems = scenario(world, settings.retrain_on_new_data.prefix)
        say(
            f"   FSx import tasks: {len(fsx.tasks) if fsx else 0}; `trainstack triggers` shows the same state"
        )
    for problem in problems:
        say(f"FAILED: {problem}")
    if not problems:
        say(
            "every check held: one run per burst, one more for data that landed during it, "
            "none for the same data"
        )
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
