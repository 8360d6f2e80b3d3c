"""The dataset manifest: trainstack.manifest (Python, what the CLI computes) and the Step Functions
fragment stacks/pipeline/dataset_manifest.py give the same hash, object count and bytes for the same
objects, over several ListObjectsV2 pages."""

from __future__ import annotations

import hashlib

import boto3
import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from moto import mock_aws

from localaws.emulator import VirtualClock, local_stepfunctions
from stacks.pipeline.dataset_manifest import DatasetManifest
from stacks.pipeline.jsonata_text import expression
from tests.pipeline import harness
from tests.pipeline.fragments import chain_definition
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


def _manifest_chain(stack) -> sfn.IChainable:
    bucket = s3.Bucket.from_bucket_name(stack, "Datasets", BUCKET)
    manifest = DatasetManifest(stack, "Manifest", bucket=bucket, prefix="$states.input.prefix")
    return manifest.next(
        sfn.Succeed.jsonata(
            stack, "Report", outputs=expression('{"manifest": $datasetManifest, "input": $states.input}')
        )
    )


@pytest.fixture(scope="module")
def definition() -> str:
    return chain_definition(_manifest_chain)


@pytest.fixture
def world(monkeypatch, definition):
    for variable, value in {
        "AWS_DEFAULT_REGION": harness.REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }.items():
        monkeypatch.setenv(variable, value)
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        with local_stepfunctions(VirtualClock()):
            client = boto3.client("s3", region_name=harness.REGION)
            client.create_bucket(Bucket=BUCKET)
            yield client, harness.create_state_machine(definition, "manifest")


def _machine_manifest(machine_arn: str, prefix: str, name: str) -> tuple[dict, harness.Outcome]:
    outcome = harness.run(machine_arn, {"prefix": prefix}, name)
    assert outcome.status == "SUCCEEDED", outcome.cause
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
    assert len(outcome.events("TaskSucceeded")) == 3, "one ListObjectsV2 call a page"


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
