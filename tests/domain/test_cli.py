"""`trainstack start`, `status` and `watch` against moto's Step Functions, CloudFormation and SageMaker."""

from __future__ import annotations

import json
import re

import boto3
import pytest

from tests.aws_fixtures import REGION, SUCCEEDS, pipeline, state_machine, training_job
from trainstack.cli import main

FAILS = {
    "StartAt": "Give up",
    "States": {
        "Give up": {"Type": "Fail", "Error": "CapacityExhausted", "Cause": "no capacity in 12 attempts"}
    },
}


def executions(state_machine_arn: str) -> list[dict]:
    client = boto3.client("stepfunctions", region_name=REGION)
    return [
        client.describe_execution(executionArn=item["executionArn"])
        for item in client.list_executions(stateMachineArn=state_machine_arn)["executions"]
    ]


def test_start_finds_the_state_machine_in_the_stack_outputs_and_sends_the_input(aws, capsys):
    arn = pipeline(SUCCEEDS)
    code = main(
        [
            "start",
            "--profile",
            "llama-7b-smp",
            "--hp",
            "learning_rate=3e-4",
            "--hp",
            "max_steps=10",
            "--run-name",
            "trainstack-llama-v2",
            "--instance-count",
            "4",
            "--max-runtime-hours",
            "12",
            "--resume-from",
            "s3://trainstack-checkpoints/trainstack-llama-v1/",
        ]
    )
    assert code == 0
    (execution,) = executions(arn)
    captured = capsys.readouterr()
    assert captured.out.strip() == execution["executionArn"]
    # The plan of the run it started: the profile with the run's instance count and max_steps.
    # Then the quota check: no quota is applied in this account (tests/domain/test_service_quotas.py).
    assert [line.split(" GiB")[0] for line in captured.err.splitlines()][:2] == [
        "plan: ml.p5.48xlarge x4: 25.7 of 79.6",
        "plan: ml.p4de.24xlarge x4: 25.7 of 80.0",
    ]
    assert json.loads(execution["input"]) == {
        "profile": "llama-7b-smp",
        "runName": "trainstack-llama-v2",
        "hyperparameters": {"learning_rate": "3e-4", "max_steps": "10"},
        "instanceCount": 4,
        "maxRuntimeHours": 12.0,
        "resumeFrom": "s3://trainstack-checkpoints/trainstack-llama-v1/",
    }


def test_start_defaults_profile_and_a_timestamped_run_name(aws):
    arn = state_machine(SUCCEEDS)
    assert main(["start", "--state-machine-arn", arn]) == 0
    (execution,) = executions(arn)
    sent = json.loads(execution["input"])
    assert sent["profile"] == "llama-7b-smp"
    assert sent["runName"].startswith("trainstack-llama-7b-smp-")


def test_start_without_the_pipeline_stack_says_how_to_fix_it(aws, capsys):
    assert main(["start"]) == 1
    assert capsys.readouterr().err.strip() == (
        "trainstack start: stack trainstack-pipeline does not exist in us-east-1; "
        "deploy it (cdk deploy trainstack-pipeline) or pass --state-machine-arn."
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--profile", "gpt-5"], "trainstack start: --profile: profile must be one of: llama-7b-smp,"),
        (["--run-name", "llama"], "trainstack start: --run-name: runName must start with 'trainstack-'"),
        (["--hp", "learning_rate"], "trainstack start: --hp: expected NAME=VALUE such as learning_rate=3e-4"),
        (["--hp", "mp_parameters={}"], "trainstack start: --hp: hyperparameters may not set"),
        (
            ["--instance-count", "0"],
            "trainstack start: --instance-count: instanceCount must be a whole number",
        ),
        (
            ["--max-runtime-hours", "-1"],
            "trainstack start: --max-runtime-hours: maxRuntimeHours must be a number",
        ),
        (["--resume-from", "/tmp/ckpt"], "trainstack start: --resume-from: resumeFrom must be an S3 URI"),
        (
            ["--profile", "small-torchrun", "--max-runtime-hours", "10"],
            "trainstack start: --max-runtime-hours: maxRuntimeHours must be at most 8",
        ),
        (["--config", "/nonexistent.yaml"], "trainstack start: --config: /nonexistent.yaml: cannot read"),
    ],
)
def test_bad_input_is_one_sentence_naming_the_flag_exit_2_and_no_aws_call(monkeypatch, capsys, argv, message):
    def no_aws(*args, **kwargs):
        raise AssertionError("an AWS client was created")

    monkeypatch.setattr(boto3, "client", no_aws)
    with pytest.raises(SystemExit) as raised:
        raise SystemExit(main(["start", *argv]))
    assert raised.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and "\n" not in err


def test_wait_follows_to_success_and_prints_the_output(aws, capsys):
    arn = state_machine(SUCCEEDS)
    training_job("trainstack-llama-v3-1")
    training_job("trainstack-llama-v3-2")
    code = main(
        [
            "start",
            "--state-machine-arn",
            arn,
            "--run-name",
            "trainstack-llama-v3",
            "--wait",
            "--poll-seconds",
            "0.05",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert re.search(
        r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ +\d+:\d\d:\d\d  "
        r"SUCCEEDED \| attempt 2 \| trainstack-llama-v3-2 \| Completed / Completed$",
        out,
        re.MULTILINE,
    )
    assert json.loads(out[out.index("{") :]) == {"attempts": 2}


def test_wait_exits_non_zero_with_the_error_name_and_cause(aws, capsys):
    arn = state_machine(FAILS)
    code = main(["start", "--state-machine-arn", arn, "--wait", "--poll-seconds", "0.05"])
    captured = capsys.readouterr()
    assert code == 1
    assert "no training job yet" in captured.out
    assert captured.err.strip().splitlines()[-1] == (
        "trainstack: execution FAILED: CapacityExhausted: no capacity in 12 attempts"
    )


def test_status_and_watch_an_existing_execution(aws, capsys):
    arn = state_machine(FAILS)
    main(["start", "--state-machine-arn", arn, "--run-name", "trainstack-nightly"])
    execution_arn = capsys.readouterr().out.strip()
    training_job(
        "trainstack-nightly-1",
        TensorBoardOutputConfig={
            "S3OutputPath": "s3://trainstack-artifacts/trainstack-nightly/trainstack-nightly-1/tensorboard/"
        },
    )
    assert main(["watch", execution_arn, "--poll-seconds", "0.05"]) == 1
    assert "attempt 1 | trainstack-nightly-1" in capsys.readouterr().out
    assert main(["status", execution_arn]) == 1
    printed = capsys.readouterr().out
    assert printed.startswith(f"{execution_arn}: FAILED")
    assert "error: CapacityExhausted: no capacity in 12 attempts" in printed
    assert "tensorboard: tensorboard --logdir s3://trainstack-artifacts/trainstack-nightly/ (every" in printed


@pytest.mark.parametrize("command", ["status", "watch", "logs", "stop"])
def test_every_run_command_rejects_a_non_execution_arn_without_calling_aws(monkeypatch, capsys, command):
    def no_aws(*args, **kwargs):
        raise AssertionError("an AWS client was created")

    monkeypatch.setattr(boto3, "client", no_aws)
    assert main([command, "arn:aws:states:us-east-1:123456789012:stateMachine:x"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"trainstack {command}: RUN: 'arn:aws:states:us-east-1:123456789012:stateMachine:x' is not a "
        "Step Functions execution ARN (arn:aws:states:<region>:<account>:execution:<state machine>:<name>) "
        "nor a run name."
    )


def test_check_config_and_size_fsx_run_without_boto3():
    """`make synth` installs no more than it needs: the commands it runs must not import the AWS SDK."""
    import subprocess
    import sys

    script = (
        "import sys; sys.modules['boto3'] = None; "
        "from trainstack.cli import main; "
        "sys.exit(main(['check-config'])"
        " or main(['size-fsx', '--dataset-gib', '100', '--epoch-seconds', '30']))"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "config OK" in result.stdout


def test_help_describes_the_product_and_lists_every_command(capsys):
    from trainstack.cli import COMMANDS

    with pytest.raises(SystemExit) as raised:
        main(["--help"])
    assert raised.value.code == 0
    out = capsys.readouterr().out
    assert "Retrain large PyTorch models on Amazon SageMaker" in out
    assert all(command in out for command in COMMANDS)


def test_a_flag_error_shows_the_subcommands_usage(capsys):
    with pytest.raises(SystemExit) as raised:
        main(["start", "--instance-count", "two"])
    assert raised.value.code == 2
    *usage, message = capsys.readouterr().err.strip().splitlines()
    assert usage[0].startswith("usage: trainstack start [-h] [--profile PROFILE]")
    assert message == "trainstack start: argument --instance-count: invalid int value: 'two'."


def test_config_defaults_to_trainstack_config(monkeypatch, tmp_path, capsys):
    config = tmp_path / "team.yaml"
    config.write_text("project: x\n")  # invalid on purpose: it must be the file read
    monkeypatch.setenv("TRAINSTACK_CONFIG", str(config))
    assert main(["check-config"]) == 1
    assert main(["runs"]) == 2
    errors = capsys.readouterr().err
    assert f"trainstack: {config}: project: 'x' is not 2 to 21 lowercase letters" in errors
    assert f"trainstack runs: --config: {config}: project:" in errors
