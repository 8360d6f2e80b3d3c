"""`make demo` (python -m localaws.demo): one retraining end to end on this machine, no AWS.

1. The training state machine exactly as `make synth` wrote it to cdk.out.
2. A small dataset (the Python standard library's sources, byte tokens) stands for the dataset bucket.
3. moto's Step Functions runs the state machine (localaws.emulator: AWS's JSONata and error names,
   a clock running --speedup times faster so that back-offs and polls are short); SageMaker is
   simulated by real local training processes (localaws.sagemaker.local_processes).
4. `trainstack start --wait` starts the retraining and follows it. The first attempt loses its
   capacity after its first checkpoint (CapacityError); the pipeline backs off and creates the next
   attempt on the same checkpoint prefix, which resumes from that checkpoint and finishes.
   With `--fault hang` (`make demo-fault`) the first attempt hangs instead: one rank stops after the
   first checkpoint (train.py's `--inject-hang-at-step`), train.py's watchdog ends the workers, and
   torchrun restarts them inside the same job (the profile's in_job_restarts, PET_MAX_RESTARTS): they
   resume from that checkpoint and finish, with no second CreateTrainingJob. (Where the restart budget
   runs out, the job fails, the pipeline classifies its FailureReason as an infrastructure fault
   (trainstack.faults), backs off and resumes in a new job.)
   `trainstack report` then writes <workdir>/report.html and `trainstack status` prints the run with
   its goodput line; each job's TensorBoard event files are
   uploaded to its TensorBoardOutputConfig.S3OutputPath, <workdir>/s3/<bucket>/<run>/<job>/tensorboard,
   and, where the profile names a SageMaker managed MLflow tracking server, each job logs its parameters and
   metrics to the local MLflow store standing for it, <workdir>/mlflow/<server>, which the demo reads back.
5. The model artifact the execution outputs loads with transformers' AutoModelForCausalLM.
With --code DIR (`make demo CODE=DIR ENTRY=FILE`) the run trains the team's own code on the data of DIR's
generator instead of train.py on token shards (localaws/demo/own_code.py); step 5 names its model folder.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from datetime import UTC, datetime
from pathlib import Path
from unittest import mock

from localaws.demo import registry_run
from localaws.demo.narration import report_attempts, report_mlflow, say
from localaws.demo.own_code import HELD_OUT, demo_code, generate_data, start_arguments
from localaws.demo.target import DemoRefusal, DemoTarget, demo_target, emulate_queue
from localaws.opt_ml import TRAINING_SCRIPTS
from localaws.s3_endpoint import create_bucket
from localaws.sagemaker.local_processes import LocalTraining
from trainstack.planning.goodput_model import best_interval
from trainstack.team_code import code_prefix

CORPUS_MODULES = (
    "argparse",
    "contextlib",
    "dataclasses",
    "functools",
    "json/__init__",
    "logging/__init__",
    "pathlib/__init__",
    "shutil",
    "textwrap",
    "typing",
)


# The demo's fault model for `--checkpoint-interval auto`: one failure per run (the demo injects one), a save
# that blocks for about one step. The interval is trainstack's goodput optimum (planning/goodput_model.py)
# in steps; train.py gets it as the run's checkpoint_interval hyperparameter.
DEMO_SAVE_STEPS = 1.0


def _interval(text: str) -> str | int:
    if text == "auto":
        return text
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(
            f"must be auto or a whole number of steps of at least 1, got '{text}'"
        )
    return int(text)


def demo_interval(max_steps: int) -> int:
    return best_interval(1.0, DEMO_SAVE_STEPS, 0.0, float(max_steps)).interval_steps


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m localaws.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="config/default.yaml", help="the config `make synth` used")
    parser.add_argument("--team", help="with teams: the team whose pipeline runs the retraining")
    parser.add_argument(
        "--cdk-out", default="cdk.out", type=Path, help="where `make synth` wrote the templates"
    )
    parser.add_argument(
        "--workdir", default="demo-run", type=Path, help="local S3, jobs and logs (emptied first)"
    )
    parser.add_argument(
        "--profile", help="a profile of the pipeline (default: its first torchrun profile, else its first)"
    )
    parser.add_argument(
        "--code", type=Path, help="the team's own code directory, run as `trainstack start --code` runs it"
    )
    parser.add_argument("--entry", help="its entry point (default: the profile's code.entry_point)")
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument(
        "--checkpoint-interval",
        type=_interval,
        default="auto",
        help="steps between checkpoints, or auto: the goodput optimum for the demo's fault model",
    )
    parser.add_argument("--speedup", type=float, default=30.0, help="emulated time runs this much faster")
    parser.add_argument(
        "--fault",
        choices=sorted(FAULTS),
        default="capacity",
        help="what ends the first attempt: a capacity loss, or a hang that train.py's watchdog ends",
    )
    parser.add_argument(
        "--worse-run",
        action=argparse.BooleanOptionalAction,
        default=True,
        help=f"after the retraining, a second run of {registry_run.WORSE_STEPS} steps whose worse model the "
        "registry rejects (docs/registry.md); --no-worse-run leaves it out (two fewer jobs)",
    )
    return parser.parse_args(argv)


# What happens to the first attempt, as the demo announces it.
FAULTS = {
    "capacity": "the first attempt will lose its capacity after its first checkpoint",
    "hang": "a rank of the first attempt will hang after its first checkpoint until train.py's watchdog ends "
    "the workers, which torchrun restarts inside the same job",
}


# train.py's watchdog for the demo's tiny steps (docs/training.md, "Hang watchdog"): a hang after the first
# steps ends after 10 s (+ 2 s for the peers' stacks); the collective timeout stays above every bound.
WATCHDOG_DEMO_BOUND = {
    "inject_hang_rank": "1",
    "watchdog_min_seconds": "10",
    "watchdog_startup_seconds": "120",
    "watchdog_save_seconds": "120",
    "collective_timeout_seconds": "300",
}
# The hang comes this many steps after the first checkpoint, which is complete by then: the restarted
# workers resume it.
HANG_STEPS_AFTER_CHECKPOINT = 5


def simulated_training(args: argparse.Namespace, workdir: Path, dataset: Path) -> LocalTraining:
    if args.fault == "hang":
        hang_step = args.checkpoint_interval + HANG_STEPS_AFTER_CHECKPOINT
        hang = {"inject_hang_at_step": str(hang_step), **WATCHDOG_DEMO_BOUND}
        return LocalTraining(workdir, dataset, hang_failures=1, hang_hyperparameters=hang)
    return LocalTraining(workdir, dataset, capacity_failures=1)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        target = demo_target(args.config, args.team, args.profile)
        args.own_code = demo_code(args.code, args.entry, target.profile)
        pipeline = target.pipeline(args.cdk_out)
        if args.own_code:
            shutil.rmtree(args.workdir, ignore_errors=True)
            dataset = generate_data(args.own_code, args.workdir)
    except DemoRefusal as error:
        print(f"python -m localaws.demo: {str(error).rstrip('.')}.", file=sys.stderr)
        return 2
    if args.checkpoint_interval == "auto":
        args.checkpoint_interval = demo_interval(args.max_steps)
        say(
            f"checkpoint_interval auto: every {args.checkpoint_interval} steps, the goodput optimum for one "
            f"failure per {args.max_steps}-step run and saves blocking about {DEMO_SAVE_STEPS:g} step"
        )
    settings = target.settings
    say(f"rehearsing profile {target.profile.name} of {target.whose} in {settings.region}")
    say(
        f"1/5 synthesized pipeline: {pipeline.template_path}, state machine {pipeline.name} "
        f"({pipeline.states} states)"
    )
    if args.own_code:
        say(f"2/5 dataset: written by {args.own_code.generator} to {dataset}; code {args.own_code.directory}")
    else:
        shutil.rmtree(args.workdir, ignore_errors=True)
        dataset = prepare_dataset(args.workdir)
        say(
            f"2/5 dataset: {sum(f.stat().st_size for f in dataset.rglob('*.bin')) // 2:,} tokens in {dataset}"
        )
    os.environ.update(
        {"AWS_ACCESS_KEY_ID": "demo", "AWS_SECRET_ACCESS_KEY": "demo", "AWS_DEFAULT_REGION": settings.region}
    )
    os.environ.pop("AWS_PROFILE", None)
    run_name = f"{target.runs.project}-demo-{datetime.now(UTC):%H%M%S}"
    training = simulated_training(args, args.workdir.resolve(), dataset)
    output = run_pipeline(args, target, pipeline, training, run_name)
    if output is None:
        return 1
    if args.own_code:
        uri = output["modelArtifacts"]
        say(
            f"5/5 the team's model: {uri} (= {training.local_path(uri)}), trained by code "
            f"{output['codeDigest']}. Run {run_name} done."
        )
        return 0
    return check_model(training, output, run_name)


def prepare_dataset(workdir: Path) -> Path:
    corpus, dataset = workdir / "corpus", workdir / "dataset"
    corpus.mkdir(parents=True)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for module in CORPUS_MODULES:
        source = stdlib / f"{module}.py"
        if source.exists():
            shutil.copy(source, corpus / f"{module.replace('/', '_')}.py")
    subprocess.run(
        [
            sys.executable,
            str(TRAINING_SCRIPTS / "prepare_data.py"),
            "--input",
            str(corpus),
            "--output",
            str(dataset),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return dataset


def demo_hyperparameters(max_steps: int, checkpoint_interval: int) -> dict[str, str]:
    """A tiny model on the demo dataset: seconds per run on a CPU."""
    return {
        "model_preset": "tiny",
        "seq_len": "128",
        "micro_batch_size": "4",
        "max_steps": str(max_steps),
        "learning_rate": "3e-3",
        "lr_reference_batch_size": "8",
        "warmup_steps": "10",
        "log_interval": "5",
        "val_interval": str(max_steps),
        "val_batches": "4",
        "checkpoint_interval": str(checkpoint_interval),
    }


def run_pipeline(args, target: DemoTarget, pipeline, training: LocalTraining, run_name: str) -> dict | None:
    import boto3
    import pytest
    from moto import mock_aws

    from localaws.emulator import ScaledClock, local_stepfunctions
    from localaws.sagemaker.local_processes import serving
    from trainstack.cli import main as trainstack

    own_code = args.own_code
    hyperparameters = (
        {"max_steps": str(args.max_steps), "checkpoint_interval": str(args.checkpoint_interval)}
        if own_code
        else demo_hyperparameters(args.max_steps, args.checkpoint_interval)
    )
    with (
        mock_aws(config={"stepfunctions": {"execute_state_machine": True}}),
        local_stepfunctions(ScaledClock(args.speedup)) as clock,
        pytest.MonkeyPatch.context() as monkeypatch,
        serving(training, monkeypatch, clock) as sagemaker,
    ):
        if target.queue_name:
            emulate_queue(target, pipeline, sagemaker, clock, monkeypatch)
        role = f"arn:aws:iam::123456789012:role/{target.runs.project}-pipeline"
        for child, child_definition in pipeline.children.items():
            boto3.client("stepfunctions").create_state_machine(
                name=child, definition=child_definition, roleArn=role, publish=True
            )
        state_machine_arn = boto3.client("stepfunctions").create_state_machine(
            name=pipeline.name, definition=pipeline.definition, roleArn=role
        )["stateMachineArn"]
        registry_run.stage(target, pipeline.substitutions, training, HELD_OUT if own_code else "val")
        code_flags = []
        if own_code:
            artifact_bucket = pipeline.substitutions["ArtifactBucket"]
            create_bucket(boto3.client("s3"), artifact_bucket, target.settings.region)
            code_flags = start_arguments(own_code, code_prefix(artifact_bucket, target.runs.project))
        say(
            f"3/5 emulator: {state_machine_arn} in moto; SageMaker runs jobs as local processes under "
            f"{training.root / 'jobs'}; emulated time runs {args.speedup:g}x faster (a 300 s back-off takes "
            f"{300 / args.speedup:g} s; the elapsed column below and the report's times and billed seconds "
            f"are emulated time); {FAULTS[args.fault]}"
        )
        team = ["--team", target.runs.team] if target.runs.team else []
        where = ["--config", args.config, *team, "--state-machine-arn", state_machine_arn]
        # Local processes stand for one instance, whatever the profile asks for.
        start = [
            "start",
            *where,
            "--profile",
            target.profile.name,
            "--instance-count",
            "1",
            *code_flags,
            "--run-name",
        ]
        command = [*start, run_name, "--wait", "--poll-seconds", "1"]
        for name, value in hyperparameters.items():
            command += ["--hp", f"{name}={value}"]
        say(f"4/5 trainstack {' '.join(start)} {run_name} --wait --hp ...")
        with mock.patch("trainstack.runs.clock", lambda: clock.now(UTC)):
            code = trainstack(command)
        execution = boto3.client("stepfunctions").list_executions(stateMachineArn=state_machine_arn)[
            "executions"
        ][0]
        described = boto3.client("stepfunctions").describe_execution(executionArn=execution["executionArn"])
        report = args.workdir / "report.html"
        trainstack(["report", run_name, *where, "--out", str(report)])
        trainstack(["status", run_name, *where])  # ends with the run's goodput line
        first = registry_run.execution_output(state_machine_arn, run_name)
        if code == 0 and first is not None:
            say(f"   registry: run {run_name}: {registry_run.decision_line(first)}")
            # The worse run's changes are train.py's flags (registry_run.worse_hyperparameters).
            if args.worse_run and target.profile.registry is not None and not own_code:
                run_worse(start, hyperparameters, clock, state_machine_arn, run_name)
            trainstack(["models", *where])
    report_attempts(sagemaker, training, run_name)
    report_mlflow(target.profile, training)
    if code != 0:
        say(f"the retraining did not succeed (exit {code}); job logs: {training.root / 'jobs'}")
        return None
    return json.loads(described["output"])


def run_worse(
    start: list[str], hyperparameters: dict[str, str], clock, state_machine_arn: str, run_name: str
) -> None:
    """The registry's second decision: a run of WORSE_STEPS steps, whose worse model the gate rejects;
    `start`: the first run's `trainstack start` up to its --run-name."""
    from trainstack.cli import main as trainstack

    worse_name = f"{run_name}-worse"
    say(f"   registry: run {worse_name} trains only {registry_run.WORSE_STEPS} steps: a worse model")
    start = [*start, worse_name, "--wait", "--poll-seconds", "1"]
    for name, value in {**hyperparameters, **registry_run.worse_hyperparameters()}.items():
        start += ["--hp", f"{name}={value}"]
    with mock.patch("trainstack.runs.clock", lambda: clock.now(UTC)):
        trainstack(start)
    worse = registry_run.execution_output(state_machine_arn, worse_name)
    if worse is not None:
        say(f"   registry: run {worse_name}: {registry_run.decision_line(worse)}")


def check_model(training: LocalTraining, output: dict, run_name: str) -> int:
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()

    # The job uploads the model uncompressed (CompressionType NONE): its files under .../output/model/.
    uri = next((value for value in _strings(output) if value.endswith("/output/model/")), None)
    if uri is None:
        say(f"the execution output names no model folder (.../output/model/): {output}")
        return 1
    model_dir = training.local_path(uri)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    parameters = sum(parameter.numel() for parameter in model.parameters())
    say(
        f"5/5 {uri} (= {model_dir}) loads with AutoModelForCausalLM: {type(model).__name__}, "
        f"{parameters:,} parameters. Run {run_name} done."
    )
    return 0


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
