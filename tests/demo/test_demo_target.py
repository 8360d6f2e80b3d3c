"""`make demo CONFIG= TEAM= PROFILE=`'s cheap parts (the full run is tests/demo/test_demo.py): the team's own
synthesized pipeline, the dataset bucket created in the config's region, and the configs it cannot run, each
refused in one sentence with exit code 2 before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
import yaml
from moto import mock_aws

from localaws.demo import registry_run
from localaws.demo.run import main
from localaws.demo.synthesized import local_value
from localaws.demo.target import demo_target
from localaws.sagemaker.local_processes import LocalTraining
from tests.conftest import DEFAULT_CONFIG, REPO_ROOT, TEAMS_CONFIG

EU_CONFIG = REPO_ROOT / "config/examples/eu-west-1.yaml"


def test_with_teams_the_demo_runs_the_teams_own_pipeline_on_the_shared_queue(teams_app):
    _, _, assembly = teams_app
    target = demo_target(str(TEAMS_CONFIG), "research", None)
    pipeline = target.pipeline(Path(assembly.directory))
    assert pipeline.template_path.name == "trainstack-research-pipeline.template.json"
    assert pipeline.name == "trainstack-research-pipeline"
    assert target.profile.name == "small-torchrun"  # research's first torchrun profile
    assert target.dataset_prefix == "datasets/research/"
    # The attempt submits to the queue both teams share (the queue stack's output in the team's template).
    attempt = json.loads(pipeline.children["trainstack-research-pipeline-attempt"])
    assert (
        f"job-queue/{target.queue_name}" in json.dumps(attempt) and target.queue_name == "trainstack-training"
    )


def test_the_dataset_bucket_is_created_in_the_configs_region(tmp_path, monkeypatch):
    """S3 refuses a CreateBucket without a LocationConstraint anywhere but us-east-1."""
    target = demo_target(str(EU_CONFIG), None, None)
    dataset = tmp_path / "dataset"
    for split in ("train", "val"):
        (dataset / split).mkdir(parents=True)
        (dataset / split / "shard-000.bin").write_bytes(b"\0\1" * 8)
    substitutions = {
        name: local_value(name, target.runs.project, "eu-west-1")
        for name in ("DatasetBucket", "TrainingImageUri")
    }
    for variable, value in {"AWS_ACCESS_KEY_ID": "demo", "AWS_SECRET_ACCESS_KEY": "demo"}.items():
        monkeypatch.setenv(variable, value)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    with mock_aws():
        registry_run.stage(target, substitutions, LocalTraining(tmp_path, dataset))
        s3 = boto3.client("s3")
        bucket = substitutions["DatasetBucket"]
        assert s3.get_bucket_location(Bucket=bucket)["LocationConstraint"] == "eu-west-1"
        keys = [item["Key"] for item in s3.list_objects_v2(Bucket=bucket)["Contents"]]
        assert keys == ["datasets/train/shard-000.bin", "datasets/val/shard-000.bin"]


@pytest.mark.parametrize(
    ("arguments", "sentence"),
    [
        (["--config", str(TEAMS_CONFIG)], "--team is missing: name one of research, search."),
        (
            ["--config", str(TEAMS_CONFIG), "--team", "vision"],
            "--team 'vision' is not a team of this config: name one of research, search.",
        ),
        (
            ["--config", str(TEAMS_CONFIG), "--team", "search", "--profile", "llama-7b-smp"],
            "--profile llama-7b-smp: not a profile of team search; name one of small-torchrun.",
        ),
        (
            ["--config", str(DEFAULT_CONFIG), "--team", "research"],
            "--team research: this config has no teams: section; leave --team out.",
        ),
        (
            ["--config", str(DEFAULT_CONFIG), "--cdk-out", "{empty}"],
            "run `make synth` with this config first.",
        ),
    ],
)
def test_a_config_the_demo_cannot_run_gets_one_sentence_and_exit_code_2(
    tmp_path, capsys, arguments, sentence
):
    workdir = tmp_path / "demo-run"
    argv = [argument.replace("{empty}", str(tmp_path)) for argument in arguments]
    assert main([*argv, "--workdir", str(workdir)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("python -m localaws.demo: ") and captured.err.endswith(f"{sentence}\n")
    assert len(captured.err.splitlines()) == 1 and captured.out == ""
    assert not workdir.exists()


def without_registry(tmp_path: Path) -> Path:
    """config/default.yaml with no profile registering (its torchrun profile is small-torchrun)."""
    settings = yaml.safe_load(DEFAULT_CONFIG.read_text())
    for profile in settings["profiles"]:
        profile.pop("registry", None)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(settings))
    return path


@pytest.mark.parametrize(
    ("profile", "sentence"),
    [
        (
            "small-torchrun",
            "--profile small-torchrun: its registry evaluates with the image's Llama evaluator",
        ),
        ("llama-1b-smddp", "--profile llama-1b-smddp: strategy smddp; the demo runs a team's own code with"),
    ],
)
def test_a_profile_that_cannot_run_team_code_gets_one_sentence_and_exit_code_2(
    tmp_path, capsys, profile, sentence
):
    code = code_directory(tmp_path / "code", "train.py", "make_data.py")
    arguments = ["--config", str(DEFAULT_CONFIG), "--profile", profile, "--code", str(code)]
    assert main([*arguments, "--cdk-out", str(tmp_path), "--workdir", str(tmp_path / "run")]) == 2
    assert sentence in capsys.readouterr().err and not (tmp_path / "run").exists()


def code_directory(root: Path, *names: str) -> Path:
    root.mkdir()
    for name in names:
        (root / name).write_text("")
    return root


@pytest.mark.parametrize(
    ("files", "flags", "sentence"),
    [
        (None, ["--entry", "train.py"], "--entry names a file of the team's code: give --code DIR too."),
        (None, ["--code", "{code}"], "--code {code}: not a directory."),
        (["make_data.py"], ["--code", "{code}"], "--entry train.py: not a file of {code}."),
        (
            ["train.py", "make_data.py"],
            ["--code", "{code}", "--entry", "fit.py"],
            "--entry fit.py: not a file",
        ),
        (["train.py"], ["--code", "{code}"], "needs exactly one data generator make_*.py in it"),
        (["train.py", "make_a.py", "make_b.py"], ["--code", "{code}"], "(found: make_a.py, make_b.py)."),
    ],
)
def test_team_code_the_demo_cannot_run_gets_one_sentence_and_exit_code_2(
    tmp_path, capsys, files, flags, sentence
):
    """Checked before the synthesized pipeline is read (no cdk.out here) and before anything is written;
    The config: default.yaml's profiles without their registry: blocks."""
    config = without_registry(tmp_path)
    code = code_directory(tmp_path / "code", *files) if files else tmp_path / "code"
    workdir = tmp_path / "demo-run"
    argv = [flag.replace("{code}", str(code)) for flag in flags]
    assert (
        main(
            [
                "--config",
                str(config),
                *argv,
                "--cdk-out",
                str(tmp_path),
                "--workdir",
                str(workdir),
            ]
        )
        == 2
    )
    captured = capsys.readouterr()
    assert captured.err.startswith("python -m localaws.demo: ") and len(captured.err.splitlines()) == 1
    assert sentence.replace("{code}", str(code)) in captured.err
    assert not workdir.exists()


def test_the_demo_starts_the_team_code_as_trainstack_start_does_with_the_profiles_entry_point(tmp_path):
    """ENTRY defaults to the profile's code.entry_point; the flags are `trainstack start`'s own, so the bundle
    is packed and uploaded by its digest exactly as `trainstack start --code DIR --entry FILE` does."""
    from localaws.demo.own_code import demo_code, start_arguments
    from trainstack.cli import build_parser
    from trainstack.profiles import TeamCodeDefaults
    from trainstack.team_code import code_prefix, pack, upload

    code = code_directory(tmp_path / "code", "fit.py", "train.py", "make_data.py")
    profile = demo_target(str(without_registry(tmp_path)), None, None).profile
    with_entry = profile.model_copy(update={"code": TeamCodeDefaults(entry_point="fit.py")})
    chosen = demo_code(code, None, with_entry)
    assert chosen.entry == "fit.py" and chosen.generator == code / "make_data.py"
    assert demo_code(code, "train.py", with_entry).entry == "train.py"
    prefix = code_prefix("trainstack-artifact-local", "trainstack")
    args = build_parser("start").parse_args(
        ["start", "--profile", profile.name, *start_arguments(chosen, prefix)]
    )
    assert (args.code, args.entry, args.code_prefix) == (code, "fit.py", prefix)
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="trainstack-artifact-local")
        bundle = pack(args.code)
        assert upload(s3, prefix, bundle) == (f"{prefix}{bundle.digest}/sourcedir.tar.gz", True)
        assert upload(s3, prefix, pack(args.code))[1] is False  # the same bytes: already there


def test_the_registry_line_names_a_team_evaluations_metric_where_no_loss_was_reported():
    package = {
        "version": 1,
        "decision": "Approved",
        "reason": "first version",
        "evaluation": {"metric": 0.742188},
    }
    line = registry_run.decision_line({"modelPackage": package})
    assert line == "version 1 Approved (evaluation metric 0.742188): first version"
