"""The file system's two data repository associations as synthesized (stacks/storage/file_system_links.py):
links FSx would refuse fail synth, and a customer managed key of the checkpoint bucket lets FSx's
service-linked role export through S3."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import assertions

from stacks.storage import file_system_links
from tests.infra.conftest import FSX_STORE, infra_fixture, settings_with, synthesize_infra
from tests.infra.templates import resources
from tests.infra.test_governed import GOVERNED
from tests.infra.test_run_data_key import CREATED_KEY, existing_key_infra  # noqa: F401 (a fixture)
from trainstack.association_rules import Association, links_problem

created_key_infra = infra_fixture("created-key-links", {**CREATED_KEY, **FSX_STORE})
governed_links_infra = infra_fixture("governed-links", {**GOVERNED, **FSX_STORE})
FSX_ROLE = (
    "arn:aws:iam::111111111111:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/"
    "AWSServiceRoleForFSxS3Access_*"
)


@pytest.mark.parametrize(
    ("dataset_path", "refusal"),
    [
        ("/", "a file system path of / allows one data repository association only"),
        ("/checkpoints/dataset", "cannot have overlapping file system paths"),
        ("/checkpoints", "cannot have overlapping file system paths"),
    ],
    ids=["the-old-root-link", "nested", "the-same-directory"],
)
def test_links_fsx_would_refuse_fail_synth(monkeypatch, tmp_path, dataset_path, refusal):
    """AWS refuses overlapping associations (CreateDataRepositoryAssociation FileSystemPath): so does synth,
    before any deploy; with the fsx store, the dataset link at / (as without it) is one of them."""
    monkeypatch.setattr(file_system_links, "DATASET_FILE_SYSTEM_PATH", dataset_path)
    with pytest.raises(ValueError, match=refusal):
        synthesize_infra(settings_with(FSX_STORE), tmp_path)


def test_two_links_of_one_s3_location_are_refused():
    same = "s3://bucket/prefix/"
    problem = links_problem([Association("A", "/a", same), Association("B", "/b", same)])
    assert problem == f"A and B link the same S3 location {same}; each association needs its own"
    assert links_problem([Association("A", "/a", same), Association("B", "/ab", "s3://b/")]) is None


def fsx_statements(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Key policy statements naming FSx's role, by Sid, of every key in the template."""
    return {
        statement["Sid"]: statement
        for key in resources(template, "AWS::KMS::Key").values()
        for statement in key["Properties"]["KeyPolicy"]["Statement"]
        if statement.get("Condition", {}).get("ArnLike", {}).get("aws:PrincipalArn") == FSX_ROLE
    }


@pytest.mark.parametrize("variant", ["created_key_infra", "governed_links_infra"])
def test_a_created_checkpoint_key_lets_fsx_export_through_s3(variant, request):
    """FSx for Lustre user guide, "Working with server-side encrypted Amazon S3 buckets": the file system's
    role encrypts and decrypts with the bucket's key, in this account, through S3."""
    statements = fsx_statements(request.getfixturevalue(variant).storage_template)
    export = statements["FsxExportsCheckpointsThroughS3"]
    assert set(export["Action"]) >= {"kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey", "kms:DescribeKey"}
    assert export["Condition"]["StringEquals"] == {
        "kms:CallerAccount": "111111111111",
        "kms:ViaService": "s3.us-east-1.amazonaws.com",
    }
    if variant == "governed_links_infra":  # one key for every bucket: the dataset's statement beside
        assert set(statements) == {"FsxExportsCheckpointsThroughS3", "FsxReadsTheDatasetThroughS3"}


def test_an_existing_checkpoint_key_warns_that_its_owner_must_let_fsx_use_it(existing_key_infra):  # noqa: F811
    warnings = assertions.Annotations.from_stack(existing_key_infra.storage).find_warning(
        "*", assertions.Match.string_like_regexp("AWSServiceRoleForFSxS3Access_")
    )
    assert len(warnings) == 1
    assert fsx_statements(existing_key_infra.storage_template) == {}


def test_without_a_customer_key_fsx_needs_no_key_policy(default_infra):
    assert resources(default_infra.storage_template, "AWS::KMS::Key") == {}
