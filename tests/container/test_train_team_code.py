"""container/train with a team's own code (trainstack.team_code): the toolkit extracts a bundle into the code
directory only when it is empty (sagemaker-training 5.1.4 files.download_and_extract), so the wrapper moves
the image's copy of its scripts out of the way (the runtime library stays importable from the image's second
copy, /opt/trainstack/runtime, on the image's PYTHONPATH: tests/container/test_dockerfile.py) and leaves the
image's own runs as they were."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

WRAPPER = Path(__file__).resolve().parents[2] / "container" / "train"

# Stands in for the image's python3 running the toolkit: it records what the toolkit would see.
FAKE_TOOLKIT = """#!/usr/bin/env bash
echo "${PYTHONPATH:-}" > "$WORK/pythonpath"
ls -A "$SAGEMAKER_BASE_DIR/code" > "$WORK/code-listing"
"""


@pytest.fixture
def image(tmp_path):
    """The wrapper where the image has it (/opt/trainstack/bin/train) and /opt/ml with the image's scripts."""
    (tmp_path / "opt" / "trainstack" / "bin").mkdir(parents=True)
    shutil.copy(WRAPPER, tmp_path / "opt" / "trainstack" / "bin" / "train")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python3").write_text(FAKE_TOOLKIT)
    (tmp_path / "bin" / "python3").chmod(0o755)
    (tmp_path / "ml" / "code").mkdir(parents=True)
    (tmp_path / "ml" / "code" / "train.py").write_text("# the image's\n")
    (tmp_path / "ml" / "input" / "config").mkdir(parents=True)
    return tmp_path


def run_wrapper(image: Path, hyperparameters: dict[str, str]) -> None:
    (image / "ml" / "input" / "config" / "hyperparameters.json").write_text(json.dumps(hyperparameters))
    env = {
        "PATH": f"{image / 'bin'}:/usr/bin:/bin",
        "WORK": str(image),
        "SAGEMAKER_BASE_DIR": str(image / "ml"),
        "TRAINSTACK_SKIP_PREFLIGHT": "1",
        "HOME": os.environ.get("HOME", "/tmp"),
    }
    subprocess.run(
        ["bash", str(image / "opt" / "trainstack" / "bin" / "train"), "train"], env=env, check=True
    )


def test_a_teams_code_gets_an_empty_code_directory(image):
    (image / "ml" / "code" / "trainstack_runtime").mkdir()
    (image / "ml" / "code" / "trainstack_runtime" / "job.py").write_text("# the image's\n")
    run_wrapper(image, {"sagemaker_submit_directory": '"s3://b/code/t/x/sourcedir.tar.gz"'})
    assert (image / "code-listing").read_text() == ""


def test_the_images_own_run_keeps_its_code_where_it_was(image):
    run_wrapper(image, {"sagemaker_program": '"train.py"'})
    assert (image / "code-listing").read_text() == "train.py\n"
    assert (image / "pythonpath").read_text().strip() == ""
