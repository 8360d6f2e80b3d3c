"""A team's own code (trainstack.team_code): packed reproducibly, and `trainstack start --code DIR` uploading
it by its sha256 once and starting the run with `code` in the input, against moto's S3 and Step Functions."""

from __future__ import annotations

import argparse
import io
import json
import os
import tarfile

import boto3
import pytest

from tests.aws_fixtures import REGION, SUCCEEDS, pipeline
from trainstack.cli import main
from trainstack.commands.start import _team_code
from trainstack.profiles import TeamCodeDefaults
from trainstack.team_code import pack

PREFIX = "s3://trainstack-artifacts/code/trainstack/"


@pytest.fixture
def team_code(tmp_path):
    code = tmp_path / "my-model"
    (code / "src").mkdir(parents=True)
    (code / "fit.py").write_text("import torch\n")
    (code / "src" / "data.py").write_text("ROWS = 4\n")
    (code / "run.sh").write_text("#!/bin/sh\n")
    (code / "run.sh").chmod(0o755)
    (code / "src" / "__pycache__").mkdir()
    (code / "src" / "__pycache__" / "data.cpython-311.pyc").write_bytes(b"\0")
    return code


def test_the_same_tree_packs_to_the_same_digest_whatever_its_times_and_caches(team_code, tmp_path):
    first = pack(team_code)
    os.utime(team_code / "fit.py", (1, 1))
    (team_code / "src" / "__pycache__" / "other.pyc").write_bytes(b"\1")
    again = pack(team_code)
    assert again.digest == first.digest and again.data == first.data
    with tarfile.open(fileobj=io.BytesIO(first.data), mode="r:gz") as archive:
        members = {member.name: member for member in archive.getmembers()}
    assert sorted(members) == ["fit.py", "run.sh", "src", "src/data.py"]
    assert {(m.mtime, m.uid, m.uname) for m in members.values()} == {(0, 0, "root")}
    assert (members["run.sh"].mode, members["fit.py"].mode) == (0o755, 0o644)
    assert first.data[4:8] == bytes(4)  # gzip's MTIME field (RFC 1952): none
    (team_code / "fit.py").write_text("import torch  # changed\n")
    assert pack(team_code).digest != first.digest


def test_a_link_in_the_code_is_refused(team_code):
    (team_code / "data").symlink_to("/etc")
    with pytest.raises(ValueError, match="data is a link or a special file"):
        pack(team_code)


def test_start_with_code_uploads_it_once_by_digest_and_starts_the_run_naming_it(aws, team_code, capsys):
    arn = pipeline(SUCCEEDS)
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="trainstack-artifacts")
    digest = pack(team_code).digest
    argv = ["start", "--profile", "small-torchrun", "--code", str(team_code), "--entry", "fit.py"]
    assert main([*argv, "--run-name", "trainstack-mine-1", "--code-prefix", PREFIX]) == 0
    assert f"code {digest} (3 files) uploaded to {PREFIX}{digest}/sourcedir.tar.gz" in capsys.readouterr().err
    key = f"code/trainstack/{digest}/sourcedir.tar.gz"
    assert s3.get_object(Bucket="trainstack-artifacts", Key=key)["Body"].read() == pack(team_code).data
    assert main([*argv, "--run-name", "trainstack-mine-2", "--code-prefix", PREFIX]) == 0
    assert f"code {digest} (3 files) already in {PREFIX}" in capsys.readouterr().err
    client = boto3.client("stepfunctions", region_name=REGION)
    inputs = [
        json.loads(client.describe_execution(executionArn=item["executionArn"])["input"])
        for item in client.list_executions(stateMachineArn=arn)["executions"]
    ]
    assert [sent["code"] for sent in inputs] == [{"digest": digest, "entry": "fit.py"}] * 2


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--entry", "missing.py"], "trainstack start: --entry: missing.py is not a file of "),
        (["--entry", "src/../fit.py"], "trainstack start: --code: code.entry must be a relative path"),
    ],
)
def test_start_with_bad_code_says_so_and_uploads_nothing(aws, team_code, capsys, extra, message):
    pipeline(SUCCEEDS)
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="trainstack-artifacts")
    assert main(["start", "--code", str(team_code), "--code-prefix", PREFIX, *extra]) == 2
    assert capsys.readouterr().err.startswith(message)
    assert s3.list_objects_v2(Bucket="trainstack-artifacts").get("KeyCount") == 0


def test_a_profiles_code_entry_point_is_the_default_entry(team_code, make_settings):
    settings = make_settings()
    profile = settings.profiles[0].model_copy(update={"code": TeamCodeDefaults(entry_point="run.sh")})
    settings = settings.model_copy(update={"profiles": [profile]})
    execution_input = {"profile": profile.name}
    _team_code(argparse.Namespace(code=team_code, entry=None, code_prefix=None), settings, execution_input)
    assert execution_input["code"] == {"digest": pack(team_code).digest, "entry": "run.sh"}


def test_entry_without_code_is_a_usage_error(aws, capsys):
    assert main(["start", "--entry", "fit.py"]) == 2
    assert capsys.readouterr().err.startswith("trainstack start: --entry and --code-prefix name the team's")
