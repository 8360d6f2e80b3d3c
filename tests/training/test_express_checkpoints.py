"""The `s3-express` store trained for real on CPU: train.py's checkpoints in a directory bucket (S3 Express
One Zone), through the same s3torchconnector code as `s3-direct`, against the local S3 endpoint with the
directory-bucket protocol in front (localaws/s3_express.py: CreateSession, `s3express` signing).

s3torchconnector does not look at the bucket itself: its CRT client follows S3's endpoint rules, which turn
a bucket named `<base>--<zone id>--x-s3` into the S3Express backend (a CreateSession first, then session
signing), with a custom endpoint too (awslabs/s3-connector-for-pytorch README, "directory buckets requires
only to update the URI"; botocore's S3 endpoint ruleset)."""

from __future__ import annotations

import signal

import pytest

from localaws.s3_endpoint import local_s3, s3_client
from tests.training.harness import Background, load_weights, max_weight_difference, train
from trainstack.express_buckets import bucket_name

BUCKET = bucket_name("trainstack-research", "111111111111", "use1-az4")
URI = f"s3://{BUCKET}/trainstack-research-run/"


@pytest.fixture
def express(monkeypatch):
    """The local endpoint with the team's directory bucket; yields (boto3 client, buckets sessions opened)."""
    sessions: list[str | None] = []
    with local_s3(BUCKET, sessions=sessions) as environment:
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        yield s3_client(environment), sessions


def complete_steps(client) -> list[int]:
    """Steps whose save finished (marker written) in the run's prefix; a directory bucket lists unordered."""
    prefix = URI.removeprefix(f"s3://{BUCKET}/")
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    keys = [item["Key"] for page in pages for item in page.get("Contents", [])]
    return sorted(int(key.split("/")[1].removeprefix("step_")) for key in keys if key.endswith("/COMPLETE"))


def test_s3_express_resumes_a_killed_run_from_the_directory_bucket_to_the_uninterrupted_weights(
    dataset, tmp_path, express, reference_run
):
    client, sessions = express
    sessions.clear()  # the fixture's own bucket creation opened one
    killed = Background(dataset, tmp_path, "--checkpoint-dir", URI)
    killed.wait_for(lambda: len(complete_steps(client)) >= 2, "second checkpoint in the directory bucket")
    killed.kill_all()
    assert killed.finish() == -signal.SIGKILL
    assert not killed.checkpoint_dir.exists()  # nothing went to a local directory
    # The ranks' CRT clients spoke the directory-bucket protocol (their CreateSession names no bucket
    # path-style: localaws/s3_express.py); every one that names a bucket names the team's.
    assert None in sessions and set(sessions) <= {None, BUCKET}
    newest = complete_steps(client)[-1]

    resumed = train(dataset, tmp_path, "--checkpoint-dir", URI)
    assert resumed.returncode == 0, resumed.output
    assert f"Resumed from {URI}step_{newest:09d} (step {newest})" in resumed.output
    difference = max_weight_difference(load_weights(resumed.model_dir), load_weights(reference_run.model_dir))
    assert difference <= 1e-6
    assert len(complete_steps(client)) == 2  # keep_checkpoints prunes in the directory bucket too
