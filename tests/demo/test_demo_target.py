"""`make demo CONFIG= TEAM= PROFILE=`'s cheap parts (the full run is tests/demo/test_demo.py): the team's own
synthesized pipeline, the dataset bucket created in the config's region, and the configs it cannot run, each
refused in one sentence with exit code 2 before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
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
