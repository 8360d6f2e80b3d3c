"""The dataset manifest: trainstack.manifest (Python, what the CLI computes) and the Step Functions
fragment stacks/pipeline/dataset_manifest.py give the same hash, object count and bytes for the same
objects, over several ListObjectsV2 pages."""

from __future__ import annotations

import hashlib
from contextlib import contextmanager

import boto3
import pytest
from moto import mock_aws

from localaws.emulator import VirtualClock, local_stepfunctions
from tests.pipeline import harness
from tests.pipeline.manifest_machines import CALLER, create, listing_histories, manifest_definitions
from trainstack.manifest import (
    EMPTY_MANIFEST,
    PAGE_SIZE,
    Manifest,
    ManifestEntry,
    chained_digest,
    manifest_of,
    prefix_manifest,
)

BUCKET = "trainstack-datasets-test"


@pytest.fixture(scope="module")
def definitions() -> dict[str, str]:
    return manifest_definitions(BUCKET)


@pytest.fixture
def aws_environment(monkeypatch):
    for variable, value in {
        "AWS_DEFAULT_REGION": harness.REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }.items():
        monkeypatch.setenv(variable, value)


@contextmanager
def emulated(definitions: dict[str, str]):
    """The emulator with the dataset bucket and the machines: yields (s3 client, caller ARN)."""
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        with local_stepfunctions(VirtualClock()):
            client = boto3.client("s3", region_name=harness.REGION)
            client.create_bucket(Bucket=BUCKET)
            yield client, create(definitions)[CALLER]


@pytest.fixture
def world(aws_environment, definitions):
    with emulated(definitions) as world:
        yield world


def _machine_manifest(machine_arn: str, prefix: str, name: str) -> tuple[dict, harness.Outcome]:
    outcome = harness.run(machine_arn, {"prefix": prefix}, name)
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert "manifest" in outcome.output, outcome.output
    assert outcome.output["input"] == {"prefix": prefix}, "the fragment hands its input on unchanged"
    return outcome.output["manifest"], outcome


def test_the_machine_and_python_agree_over_several_pages_and_ignore_other_prefixes(world):
    client, machine = world
    objects = 2 * PAGE_SIZE + 17
    for index in range(objects):
        client.put_object(Bucket=BUCKET, Key=f"datasets/a/shard-é{index:05d}.bin", Body=b"x" * (index % 7))
    client.put_object(Bucket=BUCKET, Key="datasets/ab", Body=b"not under datasets/a/")
    expected = prefix_manifest(client, BUCKET, "datasets/a/")
    assert (expected.objects, expected.bytes) == (objects, sum(index % 7 for index in range(objects)))

    manifest, outcome = _machine_manifest(machine, "datasets/a/", "three-pages")

    assert manifest == expected.as_dict()
    assert len(outcome.events("TaskSucceeded")) == 1, "one child execution lists the three pages"
    # The child's history: 8 events and 7 a page (stacks/pipeline/manifest_listing.py's docstring).
    assert listing_histories() == [8 + 7 * 3]


def test_one_object_and_an_empty_prefix(world):
    client, machine = world
    client.put_object(Bucket=BUCKET, Key="datasets/one/only.bin", Body=b"abc")

    assert (
        _machine_manifest(machine, "datasets/one/", "one")[0]
        == prefix_manifest(client, BUCKET, "datasets/one/").as_dict()
    )
    assert _machine_manifest(machine, "datasets/none/", "none")[0] == EMPTY_MANIFEST.as_dict()


def test_the_longest_key_s3_allows_stays_within_the_hash_functions_input(world):
    """1,024-byte keys: every hashed string stays under $hash's 10,000 characters."""
    client, machine = world
    keys = [f"datasets/long/{index}" + "k" * (1024 - 16) for index in range(3)]
    for key in keys:
        client.put_object(Bucket=BUCKET, Key=key, Body=b"1")

    manifest, _ = _machine_manifest(machine, "datasets/long/", "long")

    assert manifest == prefix_manifest(client, BUCKET, "datasets/long/").as_dict()


def test_the_chain_is_the_documented_formula():
    digest = hashlib.sha256(f"{EMPTY_MANIFEST.hash}d/a\t0a\n".encode()).hexdigest()
    assert chained_digest(EMPTY_MANIFEST.hash, "d/a", '"0a"') == digest
    assert manifest_of([ManifestEntry("d/a", '"0a"', 5)]) == Manifest(digest, 1, 5)


def test_a_changed_added_or_removed_object_changes_the_hash_and_order_does_not():
    entries = [ManifestEntry(f"d/{name}", f'"{name * 32}"', 3) for name in "abc"]
    base = manifest_of(entries)

    assert manifest_of(reversed(entries)) == base
    assert manifest_of([*entries[:2], ManifestEntry("d/c", '"' + "d" * 32 + '"', 3)]).hash != base.hash
    assert manifest_of(entries[:2]).hash != base.hash
    assert manifest_of([*entries, ManifestEntry("d/e", '"e"', 0)]).hash != base.hash
    # The quotes S3 puts around an ETag do not count.
    assert manifest_of([ManifestEntry("k", '"0a"', 1)]) == manifest_of([ManifestEntry("k", "0a", 1)])
