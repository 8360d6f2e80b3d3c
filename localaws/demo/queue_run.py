"""`make demo-queue` (python -m localaws.demo.queue_run): queue mode on this machine, no AWS.

Two teams (`teams:`, docs/teams.md) share a queue of 2 instances with equal fair-share weights; teama's
budget allows it 3 runs at once. teama starts four 1-instance retrainings, then teamb one, each through
its team's pipeline (synthesized in queue mode), which submits to the emulated AWS Batch queue
(localaws.emulator.fake_batch). teama's first two take both instances and its third waits RUNNABLE; its
fourth is refused at its budget (InvalidInput, before it reaches the queue), while teamb's run is
submitted and waits too. When an instance frees up, fair share starts teamb's run before teama's third,
although teama's was submitted first: teama already uses an instance, teamb none. Every run that starts
trains a tiny model in a real local process (localaws.sagemaker.local_processes) and finishes.
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
from trainstack.team_budgets import TeamBudget
from trainstack.teams import Team, namespace

SHARES = {"teama": 1, "teamb": 1}
BUDGETS = {"teama": TeamBudget(max_concurrent_runs=3)}  # teamb has none
# (team, run) in the order the teams start them; teama's fourth is over its budget.
RUNS = (("teama", "a1"), ("teama", "a2"), ("teama", "a3"), ("teama", "a4"), ("teamb", "b1"))
REFUSED = ("teama", "a4")
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
    """The config with queue mode on (2 instances) and two teams of equal weight running only the demo's
    profile, without its registry: block (this demo shows the queue and the budget; `make demo` shows
    evaluation and registration)."""
    settings = load_settings(config)
    chosen = settings.profile(profile).model_copy(update={"registry": None})
    teams = [
        Team(
            name=name,
            profiles=[chosen.name],
            principals=[f"arn:aws:iam::{settings.account or '111111111111'}:role/ml-{name}"],
            max_instances=1,
            max_runtime_hours=chosen.max_runtime_hours,
            max_cost_usd=1000,
            weight=weight,
            budget=BUDGETS.get(name),
        )
        for name, weight in SHARES.items()
    ]
    return settings.model_copy(
        update={
            "queue": QueueSettings(enabled=True, max_instances=2, capacity_wait_hours=1),
            "profiles": [chosen],
            "teams": teams,
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
    cdk_out = synthesize(settings, args.workdir / "cdk.out")
    pipelines = {
        team: load_pipeline(
            cdk_out, settings.project, settings.region, namespace=namespace(settings.project, team)
        )
        for team in SHARES
    }
    say(
        f"1/4 synthesized in queue mode: {cdk_out} (queue of 2 instances, teams {SHARES}, budgets "
        f"{ {team: budget.max_concurrent_runs for team, budget in BUDGETS.items()} } runs at once)"
    )
    dataset = prepare_dataset(args.workdir)
    say(f"2/4 dataset in {dataset}")
    os.environ.update(
        {"AWS_ACCESS_KEY_ID": "demo", "AWS_SECRET_ACCESS_KEY": "demo", "AWS_DEFAULT_REGION": settings.region}
    )
    os.environ.pop("AWS_PROFILE", None)
    training = LocalTraining(args.workdir.resolve(), dataset)
    outcomes, started = run_queue(args, settings, cdk_out, pipelines, training)
    order = " -> ".join(started)
    say(f"4/4 Batch started the jobs in this order: {order}")
    for name, (status, output) in outcomes.items():
        say(f"   {name}: {status}, training job {output.get('trainingJobName', '-')}")
    refused = namespace(settings.project, REFUSED[0]) + f"-{REFUSED[1]}"
    if any(status != "SUCCEEDED" for name, (status, _) in outcomes.items() if name != refused):
        say(f"a run did not succeed; job logs: {training.root / 'jobs'}")
        return 1
    if outcomes[refused][0] != "FAILED":
        say(f"{refused} was not refused at teama's budget")
        return 1
    say(
        f"budget: {refused} was refused before it reached the queue, because teama already had "
        f"{BUDGETS['teama'].max_concurrent_runs} runs live, while teamb's run was submitted"
    )
    say(
        "fair share: teamb's run started before teama's third, which was submitted earlier, because teama "
        "already used an instance and teamb none"
    )
    return 0


def run_queue(args, settings, cdk_out: Path, pipelines: dict, training: LocalTraining):
    import boto3
    import pytest
    from moto import mock_aws

    from localaws.emulator import ScaledClock, local_stepfunctions
    from localaws.emulator.batch_routes import install_fake_batch
    from localaws.emulator.fake_batch import FakeBatch
    from stacks.pipeline.queue.training_queue import weight_factor

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
        # The queue stack's run-name table, each team's budget table.
        for template in cdk_out.glob("*.template.json"):
            create_tables(json.loads(template.read_text()), settings.region)
        stepfunctions = boto3.client("stepfunctions")
        arns = {}
        for team, pipeline in pipelines.items():
            role = f"arn:aws:iam::123456789012:role/{namespace(settings.project, team)}-pipeline"
            for child, child_definition in pipeline.children.items():
                stepfunctions.create_state_machine(
                    name=child, definition=child_definition, roleArn=role, publish=True
                )
            arns[team] = stepfunctions.create_state_machine(
                name=pipeline.name, definition=pipeline.definition, roleArn=role
            )["stateMachineArn"]
        say(f"3/4 emulator: {', '.join(arns.values())}; AWS Batch emulated, jobs run as local processes")
        executions = {}
        for team, run in RUNS:
            name = f"{namespace(settings.project, team)}-{run}"
            execution_input = {
                "runName": name,
                "hyperparameters": demo_hyperparameters(args.max_steps, args.max_steps),
            }
            executions[name] = stepfunctions.start_execution(
                stateMachineArn=arns[team], name=run, input=json.dumps(execution_input)
            )["executionArn"]
            # The next run's place in the queue depends on this one's submission (or its refusal).
            while not any(requested(job) == f"{name}-1" for job in list(batch.jobs.values())):
                described = stepfunctions.describe_execution(executionArn=executions[name])
                if described["status"] != "RUNNING":
                    say(f"   {team} started {name}: {described['status']} {described.get('error', '')}")
                    say(f"     {described.get('cause', '')}")
                    break
                time.sleep(0.05)
            else:
                say(f"   {team} started {name}")
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
