"""The dataset manifest: trainstack.manifest (Python, what the CLI computes) and the Step Functions
fragment stacks/pipeline/dataset_manifest.py give the same hash, object count and bytes for the same
objects, over several ListObjectsV2 pages."""

from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager

import boto3
import pytest
from moto import mock_aws

from localaws.emulator import VirtualClock, limits, local_stepfunctions
from localaws.emulator.synthetic_listing import SyntheticPrefix, install_synthetic_listing
from stacks.pipeline import manifest_listing
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
def emulated(definitions: dict[str, str], *, data_limit_caught_by_states_all: bool = False):
    """The emulator with the dataset bucket and the machines: yields (s3 client, caller ARN)."""
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        with local_stepfunctions(
            VirtualClock(), data_limit_caught_by_states_all=data_limit_caught_by_states_all
        ):
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


def _page_of_keys(client, prefix: str, filler: str) -> None:
    """A full page of the longest keys S3 allows (1,024 bytes), padded with `filler`."""
    for index in range(PAGE_SIZE):
        head = f"{prefix}{index:03d}"
        client.put_object(Bucket=BUCKET, Key=head + filler * (1024 - len(head)), Body=b"1")


def test_a_page_of_the_longest_plain_keys_is_one_page_within_the_payload_limit(world):
    client, machine = world
    _page_of_keys(client, "datasets/long/", "k")
    result = client.list_objects_v2(Bucket=BUCKET, Prefix="datasets/long/", MaxKeys=PAGE_SIZE)
    del result["ResponseMetadata"]

    manifest, _ = _machine_manifest(machine, "datasets/long/", "long")

    assert manifest == prefix_manifest(client, BUCKET, "datasets/long/").as_dict()
    assert listing_histories() == [8 + 7], "one page, no narrow ones"
    # The margin left, measured: 237,944 bytes of 262,144 here (S3 adds ChecksumType, ~25 bytes a key).
    assert limits.payload_bytes(result) < limits.PAYLOAD_LIMIT_BYTES - 20_000


@pytest.mark.parametrize("caught_by_states_all", [False, True], ids=["documented", "recorded"])
def test_keys_too_large_as_json_for_a_page_are_listed_in_narrow_pages(
    aws_environment, definitions, caught_by_states_all
):
    """1,024-byte keys of double quotes, each 2,048 bytes as JSON: the page of 200 passes 256 KiB (439,000
    bytes), is refused with States.DataLimitExceeded and listed again 32 keys at a time, under either
    reading of whether States.ALL matches that error (the catcher names it)."""
    with emulated(definitions, data_limit_caught_by_states_all=caught_by_states_all) as (client, machine):
        _page_of_keys(client, "datasets/quoted/", '"')
        manifest, _ = _machine_manifest(machine, "datasets/quoted/", "quoted")
        (history,) = listing_histories()
        expected = prefix_manifest(client, BUCKET, "datasets/quoted/").as_dict()
        full, narrow = _pages_as_listed(client, "datasets/quoted/")

    assert manifest == expected and manifest["objects"] == PAGE_SIZE
    assert (full, narrow) == (1, 3), "96 keys in narrow pages, then the 104 left fit one page"
    # A narrow page: the refused Task's 5 events, the narrow Task's 5 and MorePages' 2; no more than the
    # two full pages it counts as (7 each).
    assert history == 8 + 7 * full + 12 * narrow
    assert 12 <= 7 * manifest_listing.NARROW_PAGE_COST


def _pages_as_listed(client, prefix: str) -> tuple[int, int]:
    """(full pages, narrow pages) of `prefix` by the rule: a page whose ListObjectsV2 result passes the
    payload limit is listed as a narrow one from the same token."""
    full = narrow = 0
    token: dict[str, str] = {}
    while True:
        result = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix, MaxKeys=PAGE_SIZE, **token)
        del result["ResponseMetadata"]
        if not limits.within_payload_limit(result):
            narrow += 1
            result = client.list_objects_v2(
                Bucket=BUCKET, Prefix=prefix, MaxKeys=manifest_listing.NARROW_PAGE_SIZE, **token
            )
            del result["ResponseMetadata"]
            assert limits.within_payload_limit(result)
        else:
            full += 1
        if not result["IsTruncated"]:
            return full, narrow
        token = {"ContinuationToken": result["NextContinuationToken"]}


# The 1,000,000-object scenario with every count divided by SCALE: 4,000 objects (20 pages) against a
# 100-event history, 12 pages an execution. Each execution's history is 8 + 7 x pages (a child) or
# 8 + 8 x children (this caller), so a child stays at the same fraction of its limit as at full size
# (21,008 of 25,000; the caller 24); the one-execution fragment before the child machine needed
# 7 x pages + 4 (35,004 at full size), 144 here: past the 100. benchmarks/manifest_scale.py runs the
# full size (1,075.6 s for 5,000 pages here, histories 21,008 and 14,008 and 24: docs/emulator.md).
SCALE = 250
MILLION = 1_000_000


def test_a_million_objects_scaled_down_stay_within_every_executions_history(aws_environment, monkeypatch):
    limit, pages = limits.HISTORY_EVENT_LIMIT // SCALE, manifest_listing.PAGES_PER_EXECUTION // SCALE
    monkeypatch.setattr(limits, "HISTORY_EVENT_LIMIT", limit)
    monkeypatch.setattr(manifest_listing, "PAGES_PER_EXECUTION", pages)
    definitions = manifest_definitions(BUCKET)
    prefix = SyntheticPrefix(BUCKET, "datasets/big/", MILLION // SCALE)

    with emulated(definitions) as (_, caller):
        answered = install_synthetic_listing(prefix, monkeypatch)
        manifest, outcome = _machine_manifest(caller, prefix.prefix, "million")
        children = listing_histories()

    assert manifest == manifest_of(prefix.entries()).as_dict()
    assert len(answered) == MILLION // SCALE // PAGE_SIZE
    assert children == [8 + 7 * pages, 8 + 7 * 8]
    assert len(outcome.history) == 8 + 8 * 2
    assert max(*children, len(outcome.history)) < limit


def test_a_prefix_past_the_bound_fails_with_dataset_too_large_and_one_at_the_bound_is_listed(
    aws_environment, monkeypatch
):
    monkeypatch.setattr(manifest_listing, "PAGES_PER_EXECUTION", 2)
    monkeypatch.setattr(manifest_listing, "MAX_EXECUTIONS", 3)
    definitions = manifest_definitions(BUCKET)
    bound = 3 * 2 * PAGE_SIZE
    at_bound = SyntheticPrefix(BUCKET, "datasets/at/", bound)
    past = SyntheticPrefix(BUCKET, "datasets/past/", bound + 1)

    with emulated(definitions) as (_, caller):
        install_synthetic_listing(at_bound, monkeypatch)
        install_synthetic_listing(past, monkeypatch)
        listed, _ = _machine_manifest(caller, at_bound.prefix, "at")
        too_large = harness.run(caller, {"prefix": past.prefix}, "past")
        children = len(listing_histories())

    assert listed == manifest_of(at_bound.entries()).as_dict()
    assert too_large.status == "SUCCEEDED", "add_catch's handler took it"
    assert too_large.output["caught"] == {
        "Error": "DatasetTooLarge",
        "Cause": f"s3://{BUCKET}/datasets/past/ holds more than {bound} objects: a dataset manifest lists "
        "at most 6 ListObjectsV2 pages of 200 objects (3 executions of 2 pages; a page of 32, listed where "
        "200 keys exceed the 256 KiB result limit, counts as 2)",
    }
    assert children == 3 + 3, "no execution past the bound"


def test_a_failing_listing_reaches_the_handler_with_s3s_error_not_the_childs_wrapper(world, monkeypatch):
    from moto.s3.exceptions import S3AccessDeniedError
    from moto.s3.responses import S3Response

    def denied(self):
        raise S3AccessDeniedError()

    _, caller = world
    monkeypatch.setattr(S3Response, "list_objects_v2", denied)

    outcome = harness.run(caller, {"prefix": "datasets/a/"}, "denied")

    assert outcome.status == "SUCCEEDED", outcome.cause
    caught = outcome.output["caught"]
    # S3's error after the child's retries (AccessDenied is modelled in botocore's s3 model; AWS spells the
    # service `S3.`, moto's interpreter `s3.`: it has no S3 entry in its error-name table).
    assert caught["Error"].lower() == "s3.accessdeniedexception", caught
    assert caught["Cause"].startswith("Access Denied")


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


def test_the_child_machine_lists_only_the_dataset_bucket_and_is_valid_for_aws_tools(pipeline):
    """The synthesized child machine: s3:ListBucket on exactly the bucket its callers list (the registration's
    dataset bucket) and, by a Deny, only the prefixes they list; nothing else but logs and tracing;
    asl-validator and AWS's language service accept it."""
    from tests.pipeline.test_pipeline_template import actions, aws_validation, policy_statements

    statements = policy_statements(pipeline.template, "DatasetManifestListingStateMachineRole")
    listings = [statement for statement in statements if "s3:ListBucket" in actions(statement)]
    (listing,) = [statement for statement in listings if statement["Effect"] == "Allow"]
    (other_prefixes,) = [statement for statement in listings if statement["Effect"] == "Deny"]
    assert actions(listing) == actions(other_prefixes) == ["s3:ListBucket"]
    assert "trainstack-storage" in json.dumps(listing["Resource"]) and "*" not in json.dumps(
        listing["Resource"]
    )
    # The dataset prefix and the profile's evaluation set (config/default.yaml); absent s3:prefix is denied.
    assert other_prefixes["Condition"] == {
        "StringNotLike": {"s3:prefix": ["datasets/*", "evaluation/small/*"]}
    }
    others = [statement for statement in statements if statement not in listings]
    assert all(action.startswith(("logs:", "xray:")) for s in others for action in actions(s))
    assert aws_validation([pipeline.manifest_definition]) == [{"aslValidator": [], "languageService": []}]
