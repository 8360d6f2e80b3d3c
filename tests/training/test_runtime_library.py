"""The runtime library's reading of a team script's arguments and environment, and its refusal of a team
module that would stand in for one of its own (in-process, no process group)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
from data import UserError
from flags import parse_platform_args
from trainstack_runtime import Job

from tests.training.harness import SCRIPTS


def test_the_platforms_flags_are_read_and_every_other_pair_is_the_teams_hyperparameter():
    settings, hyperparameters = parse_platform_args(
        ["--checkpoint_dir", "s3://bucket/run/", "--checkpoint-interval", "7", "--learning_rate", "-1e-3",
         "--max_steps", "40", "--sagemaker_program", "train.py", "--layers=3"]
    )  # fmt: skip
    assert (settings.checkpoint_dir, settings.checkpoint_interval) == ("s3://bucket/run/", 7)
    assert hyperparameters == {"learning_rate": "-1e-3", "max_steps": "40", "layers": "3"}


def test_a_hyperparameter_without_a_value_is_refused_in_one_sentence():
    with pytest.raises(
        UserError, match=r"^Hyperparameter --epochs has no value: pass it as --epochs VALUE\.$"
    ):
        parse_platform_args(["--epochs", "--max_steps", "3"])


def test_channels_and_typed_hyperparameters_fail_closed(monkeypatch, tmp_path):
    job = Job.__new__(Job)  # only what these calls read
    job.hyperparameters = {"max_steps": "forty"}
    monkeypatch.setenv("SM_CHANNEL_TRAIN", str(tmp_path))
    monkeypatch.delenv("SM_CHANNEL_TEST", raising=False)
    assert job.channel("train") == tmp_path
    with pytest.raises(
        UserError, match=r"No 'test' channel: attach a channel named 'test' \(SM_CHANNEL_TEST"
    ):
        job.channel("test")
    assert job.hyperparameter("batch_size", 16, int) == 16
    with pytest.raises(UserError, match=r"^Hyperparameter max_steps: expected int, got 'forty'\.$"):
        job.hyperparameter("max_steps", 10, int)
    job.settings = SimpleNamespace(checkpoint_interval=5, model_dir=str(tmp_path))
    assert job.checkpoint_interval == 5 and job.model_dir == tmp_path


def test_a_team_module_named_like_one_of_the_librarys_is_refused(tmp_path):
    (tmp_path / "data.py").write_text("")  # the team's own data.py beside its script
    script = tmp_path / "train.py"
    script.write_text("import data\nimport trainstack_runtime\n")
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env={"PYTHONPATH": str(SCRIPTS)}
    )
    assert result.returncode != 0
    found = f"module 'data' ({SCRIPTS}), but {tmp_path / 'data.py'} is found first under that name"
    assert f"ImportError: trainstack_runtime needs its own {found}: rename the team's module data.py." in (
        result.stderr
    )
