"""`resumeFrom` into a store train.py reads directly (`s3-direct`; `s3-express` is the same code on a
directory bucket), trained for real on CPU against a local S3 endpoint: run B starts from run A's
checkpoints, read straight from S3 (train.py's `--resume-from s3://...`, the `resume_from` hyperparameter
the job request sets: trainstack.job_request.resumes_directly) instead of a `resume` channel every node
downloads whole. B reaches the uninterrupted run's weights, writes only under its own prefix, and each
rank reads only the bytes it needs of one checkpoint."""

from __future__ import annotations

import re

import pytest

from localaws.s3_endpoint import local_s3, s3_client
from tests.training.harness import (
    CHECKPOINT_INTERVAL,
    MAX_STEPS,
    TRAIN_FLAGS,
    load_weights,
    max_weight_difference,
    train,
)

BUCKET = "checkpoints"
RUN_A, RUN_B = "trainstack-a/", "trainstack-b/"
# The FSDP2 runs' own prefixes: moto's servers in one process share one S3 backend.
SHARDED_A, SHARDED_B = "trainstack-sharded-a/", "trainstack-sharded-b/"
# What run A keeps (keep_checkpoints 2): the loop saves every interval before the last step.
NEWEST, OLDER = MAX_STEPS - CHECKPOINT_INTERVAL, MAX_STEPS - 2 * CHECKPOINT_INTERVAL
# What torch.load reads beyond an item's stored bytes (its zip headers again), at most.
READ_OVERHEAD = 1.2
READ_LINE = re.compile(r"checkpoint_read rank=(\d+) bytes=(\d+) seconds=")


@pytest.fixture(scope="module")
def store(dataset, tmp_path_factory):
    """A local S3 endpoint holding run A's checkpoints (A ran to the end on s3-direct)."""
    with local_s3(BUCKET) as environment:
        client = s3_client(environment)
        run_a = train(
            dataset,
            tmp_path_factory.mktemp("run-a"),
            "--checkpoint-dir",
            f"s3://{BUCKET}/{RUN_A}",
            env=environment,
        )
        assert run_a.returncode == 0, run_a.output
        yield environment, client


def objects(client, prefix: str) -> dict[str, int]:
    """Key -> size under `prefix`."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return {item["Key"]: item["Size"] for page in pages for item in page.get("Contents", [])}


def checkpoint_bytes(client, step: int, run: str = RUN_A) -> int:
    """What DCP stores of one of `run`'s checkpoints: its shards and its .metadata."""
    folder = f"{run}step_{step:09d}/"
    return sum(
        size
        for key, size in objects(client, folder).items()
        if key.endswith(".distcp") or key.endswith(".metadata")
    )


def bytes_read_per_rank(output: str) -> dict[int, int]:
    return {int(rank): int(count) for rank, count in READ_LINE.findall(output)}


@pytest.mark.parametrize(
    "source, step",
    [
        pytest.param(f"s3://{BUCKET}/{RUN_A}", NEWEST, id="the-runs-prefix-resumes-its-newest"),
        pytest.param(f"s3://{BUCKET}/{RUN_A}step_{OLDER:09d}/", OLDER, id="one-folder-resumes-exactly-it"),
    ],
)
def test_a_run_resumed_from_another_runs_s3_checkpoint_reads_it_directly_and_reaches_its_weights(
    dataset, tmp_path, store, reference_run, source, step
):
    environment, client = store
    before = objects(client, RUN_A)
    resumed = train(
        dataset,
        tmp_path,
        "--checkpoint-dir",
        f"s3://{BUCKET}/{RUN_B}{step}/",
        "--resume-from",
        source,
        env=environment,
    )
    assert resumed.returncode == 0, resumed.output
    assert f"Resumed from s3://{BUCKET}/{RUN_A}step_{step:09d} (step {step})" in resumed.output
    difference = max_weight_difference(load_weights(resumed.model_dir), load_weights(reference_run.model_dir))
    assert difference <= 1e-6
    # A's checkpoints are only read; B's own go under B's prefix, nothing to a local directory.
    assert objects(client, RUN_A) == before
    own = {key.split("/")[2] for key in objects(client, f"{RUN_B}{step}/") if key.endswith("/COMPLETE")}
    # B saves every interval after its start, before its last step (from OLDER: NEWEST; from NEWEST: none).
    assert own == {f"step_{s:09d}" for s in range(step + CHECKPOINT_INTERVAL, MAX_STEPS, CHECKPOINT_INTERVAL)}
    assert not resumed.checkpoint_dir.exists()
    # Each rank read one checkpoint's shards and metadata (DDP: each rank needs the whole replica), never
    # the other checkpoint or the other rank's RNG state: well under the whole prefix, which a `resume`
    # channel downloads to every node. torch.load reads each item's zip headers twice: measured 1.097 x
    # the stored bytes with the tiny model's many small tensors.
    read = bytes_read_per_rank(resumed.output)
    assert sorted(read) == [0, 1]
    for count in read.values():
        assert checkpoint_bytes(client, step) <= count <= READ_OVERHEAD * checkpoint_bytes(client, step)
        assert count < 0.6 * sum(before.values())


@pytest.mark.newer_stack  # FSDP2 in torch 2.5.1 needs CUDA
def test_with_sharded_weights_each_rank_reads_about_its_own_half(dataset, tmp_path):
    """FSDP2 (2 ranks): each rank holds half of every parameter and its moments, and reads about half of
    the checkpoint's bytes (its shards, plus the .metadata and the few unsharded items every rank reads,
    and torch.load's second look at each item's headers): measured 0.614 of them per rank, where a DDP
    rank reads 1.097. Together the ranks read all of it, once each part."""
    flags = [*TRAIN_FLAGS[:1], "fsdp", *TRAIN_FLAGS[2:]]
    with local_s3(BUCKET) as environment:
        client = s3_client(environment)
        first = train(
            dataset,
            tmp_path / "a",
            "--checkpoint-dir",
            f"s3://{BUCKET}/{SHARDED_A}",
            env=environment,
            flags=flags,
        )
        assert first.returncode == 0, first.output
        second = train(
            dataset,
            tmp_path / "b",
            "--checkpoint-dir",
            f"s3://{BUCKET}/{SHARDED_B}",
            "--resume-from",
            f"s3://{BUCKET}/{SHARDED_A}",
            env=environment,
            flags=flags,
        )
        assert second.returncode == 0, second.output
        shards = checkpoint_bytes(client, NEWEST, SHARDED_A)
    read = bytes_read_per_rank(second.output)
    assert sorted(read) == [0, 1]
    assert all(0.4 * shards < count < 0.65 * shards for count in read.values()), (read, shards)
    assert sum(read.values()) >= shards
