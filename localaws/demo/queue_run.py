"""`make demo-queue` (python -m localaws.demo.queue_run): queue mode on this machine, no AWS.

Two teams share a queue of 2 instances with equal fair-share weights. teamA starts three 1-instance
retrainings, then teamB one. The pipeline (synthesized in queue mode) submits each to the emulated AWS
Batch queue (localaws.emulator.fake_batch); teamA's first two take both instances, its third and
teamB's wait RUNNABLE. When an instance frees up, fair share starts teamB's run before teamA's third,
although teamA's was submitted first: teamA already uses an instance, teamB none. Every run trains a
tiny model in a real local process (localaws.sagemaker.local_processes) and finishes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from localaws.demo.run import demo_hyperparameters, prepare_dataset, say
from localaws.demo.synthesized import create_tables, load_pipeline
from localaws.sagemaker.local_processes import LocalTraining, serving
from trainstack.config_loading import load_settings
from trainstack.queue_settings import QueueSettings

SHARES = {"teamA": 1, "teamB": 1}
# (share, run) in the order the teams start them.
RUNS = (("teamA", "a1"), ("teamA", "a2"), ("teamA", "a3"), ("teamB", "b1"))
ENDED = ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m localaws.demo.queue_run", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--config", default="config/default.yaml", help="the config to run in queue mode")
    parser.add_argument("--workdir", default="demo-queue-run", type=Path, help="emptied first")
    parser.add_argument("--profile", default="small-torchrun", help="a 1-instance torchrun profile")
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--speedup", type=float, default=30.0, help="emulated time runs this much faster")
    return parser.parse_args(argv)


def queue_settings(config: str, profile: str):
    """The config with queue mode on: 2 instances, two equal shares, only the demo's profile, without its
    registry: block (this demo shows the queue's order; `make demo` shows evaluation and registration)."""
    settings = load_settings(config)
    return settings.model_copy(
        update={
            "queue": QueueSettings(enabled=True, max_instances=2, shares=SHARES, capacity_wait_hours=1),
            "profiles": [settings.profile(profile).model_copy(update={"registry": None})],
        }
    )


def synthesize(settings, outdir: Path) -> Path:
    """The app in queue mode, as `make synth` would write it (cdk.json's feature flags)."""
    import aws_cdk as cdk

    from stacks.app_builder import build_app

    context = json.loads((Path(__file__).resolve().parents[2] / "cdk.json").read_text())["context"]
    app = cdk.App(outdir=str(outdir), context=context)
    build_app(app, settings)
    app.synth()
    return outdir


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = queue_settings(args.config, args.profile)
    shutil.rmtree(args.workdir, ignore_errors=True)
    pipeline = load_pipeline(
        synthesize(settings, args.workdir / "cdk.out"), settings.project, settings.region
    )
    say(f"1/4 synthesized in queue mode: {pipeline.template_path} (queue of 2 instances, shares {SHARES})")
    dataset = prepare_dataset(args.workdir)
    say(f"2/4 dataset in {dataset}")
    os.environ.update(
        {"AWS_ACCESS_KEY_ID": "demo", "AWS_SECRET_ACCESS_KEY": "demo", "AWS_DEFAULT_REGION": settings.region}
    )
    os.environ.pop("AWS_PROFILE", None)
    training = LocalTraining(args.workdir.resolve(), dataset)
    outcomes, started = run_queue(args, settings, pipeline, training)
    order = " -> ".join(started)
    say(f"4/4 Batch started the jobs in this order: {order}")
    for name, (status, output) in outcomes.items():
        say(f"   {name}: {status}, training job {output.get('trainingJobName', '-')}")
    if any(status != "SUCCEEDED" for status, _ in outcomes.values()):
        say(f"a run did not succeed; job logs: {training.root / 'jobs'}")
        return 1
    say(
        "fair share: teamB's run started before teamA's third, which was submitted earlier, because teamA "
        "already used an instance and teamB none"
    )
    return 0


def run_queue(args, settings, pipeline, training: LocalTraining):
    import boto3
    import pytest
    from moto import mock_aws

    from localaws.emulator import ScaledClock, local_stepfunctions
    from localaws.emulator.batch_routes import install_fake_batch
    from localaws.emulator.fake_batch import FakeBatch
    from stacks.pipeline.queue.training_queue import weight_factor

    role = f"arn:aws:iam::123456789012:role/{settings.project}-pipeline"
    with (
        mock_aws(config={"stepfunctions": {"execute_state_machine": True}}),
        local_stepfunctions(ScaledClock(args.speedup)) as clock,
        pytest.MonkeyPatch.context() as monkeypatch,
        serving(training, monkeypatch, clock) as sagemaker,
    ):
        batch = FakeBatch(
            sagemaker=sagemaker,
            max_instances=settings.queue.max_instances,
            weight_factors={name: weight_factor(weight) for name, weight in SHARES.items()},
            capacity_wait_seconds=settings.queue.capacity_wait_seconds,
            now=clock.time,
        )
        install_fake_batch(batch, monkeypatch)
        create_tables(json.loads(pipeline.template_path.read_text()), settings.region)  # the run-name table
        stepfunctions = boto3.client("stepfunctions")
        for child, child_definition in pipeline.children.items():
            stepfunctions.create_state_machine(
                name=child, definition=child_definition, roleArn=role, publish=True
            )
        arn = stepfunctions.create_state_machine(
            name=pipeline.name, definition=pipeline.definition, roleArn=role
        )["stateMachineArn"]
        say(f"3/4 emulator: {arn}; AWS Batch emulated, jobs run as local processes")
        executions = {}
        for share, run in RUNS:
            name = f"{settings.project}-{run}"
            execution_input = {
                "runName": name,
                "share": share,
                "hyperparameters": demo_hyperparameters(args.max_steps, args.max_steps),
            }
            executions[name] = stepfunctions.start_execution(
                stateMachineArn=arn, name=run, input=json.dumps(execution_input)
            )["executionArn"]
            while not any(requested(job) == f"{name}-1" for job in list(batch.jobs.values())):
                time.sleep(0.05)  # the next run's place in the queue depends on this one's submission
            say(f"   {share} started {name}")
        seen = 0
        while True:
            for job, status in batch.transitions[seen:]:
                say(f"   {request_names(batch).get(job, job)}: {status}")
            seen = len(batch.transitions)
            described = {
                name: stepfunctions.describe_execution(executionArn=arn) for name, arn in executions.items()
            }
            if all(item["status"] in ENDED for item in described.values()):
                break
            time.sleep(0.5)
        started = []
        for job, status in batch.transitions:
            if status == "SCHEDULED" and request_names(batch)[job] not in started:
                started.append(request_names(batch)[job])
        outcomes = {
            name: (item["status"], json.loads(item.get("output") or "{}")) for name, item in described.items()
        }
    return outcomes, started


def requested(job) -> str:
    """The training job name a service job's request asked for (`<run>-<attempt>`): the service job itself
    is named by its hash (trainstack.queue_settings.service_job_name)."""
    return job.payload["TrainingJobName"]


def request_names(batch) -> dict[str, str]:
    return {job.name: requested(job) for job in list(batch.jobs.values())}


if __name__ == "__main__":
    raise SystemExit(main())
