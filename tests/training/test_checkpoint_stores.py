"""The checkpoint stores a profile can choose (trainstack.checkpoint_stores), trained for real on CPU:
`s3-direct` (and `s3-express`, the same code on a directory bucket) against a local S3 endpoint, `fsx`
against a local directory every rank shares. A run killed mid-way resumes from the store and ends with
the weights of the uninterrupted reference run."""

from __future__ import annotations

import signal

import pytest

from localaws.s3_endpoint import local_s3, s3_client
from tests.training.harness import (
    CHECKPOINT_INTERVAL,
    MAX_STEPS,
    Background,
    load_weights,
    max_weight_difference,
    train,
)

BUCKET = "checkpoints"
PREFIX = "team-run/"
URI = f"s3://{BUCKET}/{PREFIX}"
# What keep_checkpoints (2) leaves: the loop saves every interval before the last step, not at it.
LAST_TWO = [MAX_STEPS - 2 * CHECKPOINT_INTERVAL, MAX_STEPS - CHECKPOINT_INTERVAL]


@pytest.fixture
def s3(monkeypatch):
    """A local S3 endpoint the training processes (which inherit os.environ) read and write."""
    with local_s3(BUCKET) as environment:
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        yield s3_client(environment)


def s3_complete_steps(client) -> list[int]:
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX).get("Contents", [])]
    return sorted(int(key.split("/")[1].removeprefix("step_")) for key in keys if key.endswith("/COMPLETE"))


def test_s3_direct_resumes_a_killed_run_from_s3_to_the_uninterrupted_weights(
    dataset, tmp_path, s3, reference_run
):
    killed = Background(dataset, tmp_path, "--checkpoint-dir", URI)
    killed.wait_for(lambda: 2 * CHECKPOINT_INTERVAL in s3_complete_steps(s3), "second checkpoint in S3")
    killed.kill_all()
    assert killed.finish() == -signal.SIGKILL
    newest = s3_complete_steps(s3)[-1]
    assert newest < MAX_STEPS
    assert not killed.checkpoint_dir.exists()  # nothing went to a local directory for SageMaker to sync

    resumed = train(dataset, tmp_path, "--checkpoint-dir", URI)
    assert resumed.returncode == 0, resumed.output
    assert f"Resumed from {URI}step_{newest:09d} (step {newest})" in resumed.output
    difference = max_weight_difference(load_weights(resumed.model_dir), load_weights(reference_run.model_dir))
    assert difference <= 1e-6
    # keep_checkpoints (2) prunes in S3; each step folder holds both ranks' shards, the metadata, the marker.
    assert s3_complete_steps(s3) == LAST_TWO
    keys = {
        o["Key"]
        for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}step_{LAST_TWO[-1]:09d}/")["Contents"]
    }
    names = {key.rsplit("/", 1)[-1] for key in keys}
    assert {".metadata", "COMPLETE", "rank_0.pt", "rank_1.pt"} <= names
    assert len([name for name in names if name.endswith(".distcp")]) >= 2


def test_an_s3_save_without_its_marker_is_never_resumed(dataset, tmp_path, s3, reference_run):
    # A save killed after its shards and .metadata but before the marker: the run resumes the one before.
    finished = train(dataset, tmp_path / "first", "--checkpoint-dir", URI)
    assert finished.returncode == 0, finished.output
    s3.delete_object(Bucket=BUCKET, Key=f"{PREFIX}step_{LAST_TWO[-1]:09d}/COMPLETE")
    previous = LAST_TWO[0]

    resumed = train(dataset, tmp_path / "second", "--checkpoint-dir", URI)
    assert resumed.returncode == 0, resumed.output
    assert f"Resumed from {URI}step_{previous:09d} (step {previous})" in resumed.output
    difference = max_weight_difference(load_weights(resumed.model_dir), load_weights(reference_run.model_dir))
    assert difference <= 1e-6


def test_fsx_a_shared_directory_resumes_a_killed_run_to_the_uninterrupted_weights(
    dataset, tmp_path, reference_run
):
    shared = tmp_path / "fsx" / "team" / "run"  # the team's directory on the mounted file system
    killed = Background(dataset, tmp_path, "--checkpoint-dir", str(shared), "--checkpoint-dir-shared", "true")
    killed.wait_for(
        lambda: (shared / f"step_{2 * CHECKPOINT_INTERVAL:09d}" / "COMPLETE").is_file(), "checkpoint"
    )
    killed.kill_all()
    assert killed.finish() == -signal.SIGKILL

    resumed = train(dataset, tmp_path, "--checkpoint-dir", str(shared), "--checkpoint-dir-shared", "true")
    assert resumed.returncode == 0, resumed.output
    assert f"Resumed from {shared}/step_" in resumed.output
    assert (
        max_weight_difference(load_weights(resumed.model_dir), load_weights(reference_run.model_dir)) <= 1e-6
    )
    assert sorted(p.name for p in shared.iterdir()) == [f"step_{step:09d}" for step in LAST_TWO]
