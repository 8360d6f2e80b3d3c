"""`trainstack checkpoints restore` against moto: a versioned checkpoint bucket where a run's checkpoint
was deleted (as SageMaker's sync mirrors a job's local deletes) and overwritten, then brought back byte
for byte."""

from __future__ import annotations

from datetime import timedelta

import boto3
import pytest

from tests.aws_fixtures import KEEPS_RUNNING, REGION, SUCCEEDS, pipeline, publish_output
from tests.domain.test_cli_runs import ended
from trainstack.cli import main

BUCKET = "trainstack-checkpoints-abc"
RUN = "trainstack-nightly"
STEP_100 = f"{RUN}/step_000000100/"
STEP_200 = f"{RUN}/step_000000200/"


@pytest.fixture
def s3(aws, monkeypatch):
    """The checkpoint bucket, versioned as the storage stack makes it and published as its stack's output;
    S3 stamps each write a second after the one before (LastModified has whole seconds; a job's saves lie
    minutes apart), on a virtual clock."""
    import moto.s3.models

    real_now = moto.s3.models.utcnow()
    writes = iter(range(1_000_000))
    monkeypatch.setattr(moto.s3.models, "utcnow", lambda: real_now + timedelta(seconds=next(writes)))
    client = boto3.client("s3", region_name=REGION)
    client.create_bucket(Bucket=BUCKET)
    client.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    publish_output("trainstack-storage", "CheckpointBucketName", BUCKET)
    return client


def ended_run(capsys) -> None:
    pipeline(SUCCEEDS)
    assert main(["start", "--run-name", RUN]) == 0
    ended(capsys.readouterr().out.strip())


def save(s3, folder: str, marker: bytes = b'{"step": 1}', **files: bytes) -> dict[str, bytes]:
    """A save as SageMaker uploads it: the folder's files, then its COMPLETE marker."""
    written = {f"{folder}{name}": data for name, data in files.items()} | {f"{folder}COMPLETE": marker}
    for key, data in written.items():
        s3.put_object(Bucket=BUCKET, Key=key, Body=data)
    return written


def delete(s3, keys) -> None:
    for key in keys:
        s3.delete_object(Bucket=BUCKET, Key=key)


def current(s3, prefix: str) -> dict[str, bytes]:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return {item["Key"]: s3.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read() for item in listed}


def shards(step: int) -> dict[str, bytes]:
    return {
        ".metadata": f"metadata {step}".encode(),
        "__0_0.distcp": f"rank 0 weights {step}".encode() * 1000,
        "__1_0.distcp": f"rank 1 weights {step}".encode() * 1000,
        "rng/rank_0.pt": f"rng 0 {step}".encode(),
    }


def test_a_deleted_and_overwritten_checkpoint_comes_back_as_it_was_saved(s3, capsys):
    ended_run(capsys)
    step_100 = save(s3, STEP_100, **shards(100))
    step_200 = save(s3, STEP_200, **shards(200))
    delete(s3, step_100)  # keep_last pruned step 100: the sync deleted it in S3 too
    # A faulty job then overwrote a shard of step 200, deleted the rest and left a file of its own.
    s3.put_object(Bucket=BUCKET, Key=f"{STEP_200}__0_0.distcp", Body=b"garbage")
    delete(s3, [key for key in step_200 if not key.endswith("__0_0.distcp")])
    s3.put_object(Bucket=BUCKET, Key=f"{STEP_200}stray.bin", Body=b"not a checkpoint file")

    assert main(["checkpoints", "restore", RUN]) == 0
    out = capsys.readouterr().out
    assert current(s3, f"{RUN}/") == step_200
    assert out.startswith(f"restored step 200 (s3://{BUCKET}/{STEP_200}, complete since ")
    assert "5 file(s)" in out and "3 undeleted" in out and "1 copied back from the version saved" in out
    assert "1 the save did not have removed (restorable), COMPLETE written last" in out
    assert f"`trainstack start --run-name {RUN}` resumes from it" in out
    # Nothing is left to do: a second restore says so.
    assert main(["checkpoints", "restore", RUN]) == 1
    assert capsys.readouterr().err.startswith(
        "trainstack checkpoints: nothing to restore: its newest checkpoint, step 200 "
    )
    # The older, pruned step too, on request; its deleted files come back as the very versions saved.
    saved_shards = [key for key in step_100 if not key.endswith("COMPLETE")]
    saved_versions = version_ids(s3, saved_shards)
    assert main(["checkpoints", "restore", RUN, "--step", "100"]) == 0
    assert current(s3, STEP_100) == step_100
    assert version_ids(s3, saved_shards, latest=True) == saved_versions


def version_ids(s3, keys, latest: bool = False) -> dict[str, str]:
    """The one data version of each key (latest: the current one)."""
    listed = s3.list_object_versions(Bucket=BUCKET, Prefix=f"{RUN}/")["Versions"]
    return {
        item["Key"]: item["VersionId"]
        for item in listed
        if item["Key"] in keys and item["IsLatest"] >= latest
    }


def test_a_shard_uploaded_after_the_marker_belongs_to_the_save(s3, capsys):
    """SageMaker uploads a node's files in no promised order: a shard may land after COMPLETE."""
    ended_run(capsys)
    files = shards(300)
    late = {f"{STEP_200}__1_0.distcp": files.pop("__1_0.distcp")}
    written = save(s3, STEP_200, **files)
    s3.put_object(Bucket=BUCKET, Key=next(iter(late)), Body=next(iter(late.values())))
    delete(s3, written | late)

    assert main(["checkpoints", "restore", RUN]) == 0
    assert current(s3, STEP_200) == written | late


def test_dry_run_says_what_it_would_do_and_changes_nothing(s3, capsys):
    ended_run(capsys)
    written = save(s3, STEP_100, **shards(100))
    delete(s3, written)
    before = s3.list_object_versions(Bucket=BUCKET)

    assert main(["checkpoints", "restore", RUN, "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"would restore step 100 (s3://{BUCKET}/{STEP_100}, complete since ")
    assert f"  undelete {STEP_100}__0_0.distcp" in out
    assert any(line.startswith(f"  copy back {STEP_100}COMPLETE (version ") for line in out)
    assert s3.list_object_versions(Bucket=BUCKET)["DeleteMarkers"] == before["DeleteMarkers"]
    assert current(s3, f"{RUN}/") == {}


def test_a_running_run_is_refused_unless_dry_run(s3, capsys):
    pipeline(KEEPS_RUNNING)
    assert main(["start", "--run-name", RUN]) == 0
    delete(s3, save(s3, STEP_100, **shards(100)))
    capsys.readouterr()
    assert main(["checkpoints", "restore", RUN]) == 1
    assert capsys.readouterr().err.startswith(
        f"trainstack checkpoints: run {RUN} is running: stop it first (trainstack stop {RUN})"
    )
    assert main(["checkpoints", "restore", RUN, "--dry-run"]) == 0
    assert current(s3, f"{RUN}/") == {}


def error_of(*argv: str, capsys) -> str:
    assert main(["checkpoints", "restore", *argv]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith(".\n")
    return err.removeprefix("trainstack checkpoints: ").rstrip()


def test_clear_errors_no_run_no_checkpoint_no_step_no_versioning(s3, capsys):
    ended_run(capsys)
    assert error_of("trainstack-other", capsys=capsys).startswith("no run named trainstack-other in ")
    assert error_of(RUN, capsys=capsys) == (
        f"run {RUN} has nothing in s3://{BUCKET}/{RUN}/: it saved no checkpoint, or what it saved has "
        "expired (deleted ones stay restorable for checkpoints.noncurrent_version_days)."
    )
    s3.put_object(Bucket=BUCKET, Key=f"{RUN}/step_000000100.tmp/__0_0.distcp", Body=b"unfinished")
    assert error_of(RUN, capsys=capsys) == (
        f"run {RUN} has no complete checkpoint in s3://{BUCKET}/{RUN}/, current or earlier."
    )
    save(s3, STEP_100, **shards(100))
    assert error_of(RUN, "--step", "50", capsys=capsys) == (
        f"run {RUN} has no complete checkpoint of step 50 in s3://{BUCKET}/{RUN}/; steps it has: 100."
    )
    s3.create_bucket(Bucket="unversioned-checkpoints")
    assert error_of(RUN, "--checkpoint-bucket", "unversioned-checkpoints", capsys=capsys).startswith(
        "checkpoint bucket unversioned-checkpoints is not versioned (versioning never enabled), so what a "
        "job deleted or overwrote there is gone"
    )


def test_a_missing_storage_stack_names_the_flag_that_skips_the_lookup(aws, capsys):
    ended_run(capsys)
    assert error_of(RUN, capsys=capsys) == (
        f"stack trainstack-storage does not exist in {REGION}; deploy it (cdk deploy trainstack-storage) "
        "or pass --checkpoint-bucket."
    )
