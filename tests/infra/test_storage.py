"""Storage stack: bucket protections and lifecycle; FSx for Lustre follows the sizing and links to S3."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.infra.conftest import (  # noqa: F401 (fixtures)
    AZ_ID_NAT_SCRATCH,
    FSX_STORE,
    InfraApp,
    fsx_store_infra,
    infra_fixture,
)
from tests.infra.templates import only, resources

DATA_BUCKETS = ("DatasetBucket", "CheckpointBucket", "ArtifactBucket")


def bucket(template: dict[str, Any], construct_id: str) -> tuple[str, dict[str, Any]]:
    [(name, body)] = [
        (name, body)
        for name, body in resources(template, "AWS::S3::Bucket").items()
        if name.startswith(construct_id)
    ]
    return name, body


def lifecycle_rule(body: dict[str, Any], rule_id: str = "Housekeeping") -> dict[str, Any]:
    [rule] = [rule for rule in body["Properties"]["LifecycleConfiguration"]["Rules"] if rule["Id"] == rule_id]
    return rule


def test_every_bucket_is_encrypted_private_and_retained(default_infra: InfraApp):
    buckets = resources(default_infra.storage_template, "AWS::S3::Bucket")
    assert len(buckets) == 4  # dataset, checkpoints, artifacts, access logs
    for body in buckets.values():
        properties = body["Properties"]
        assert properties["BucketEncryption"]["ServerSideEncryptionConfiguration"] == [
            {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
        ]
        assert properties["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }
        assert body["DeletionPolicy"] == body["UpdateReplacePolicy"] == "Retain"
        [abort] = [
            rule["AbortIncompleteMultipartUpload"]
            for rule in properties["LifecycleConfiguration"]["Rules"]
            if "AbortIncompleteMultipartUpload" in rule
        ]
        assert abort == {"DaysAfterInitiation": 7}


def test_every_bucket_policy_denies_requests_without_tls(default_infra: InfraApp):
    template = default_infra.storage_template
    policies = {
        body["Properties"]["Bucket"]["Ref"]: body
        for body in resources(template, "AWS::S3::BucketPolicy").values()
    }
    assert set(policies) == set(resources(template, "AWS::S3::Bucket"))
    for bucket_id, policy in policies.items():
        [deny] = [
            statement
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]
            if statement.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
        ]
        assert deny["Effect"] == "Deny" and deny["Principal"] == {"AWS": "*"} and deny["Action"] == "s3:*"
        arn = {"Fn::GetAtt": [bucket_id, "Arn"]}
        assert deny["Resource"] == [arn, {"Fn::Join": ["", [arn, "/*"]]}]


def test_data_buckets_log_access_to_the_log_bucket(default_infra: InfraApp):
    template = default_infra.storage_template
    log_bucket, _ = bucket(template, "AccessLogBucket")
    for construct_id in DATA_BUCKETS:
        _, body = bucket(template, construct_id)
        assert body["Properties"]["LoggingConfiguration"] == {
            "DestinationBucketName": {"Ref": log_bucket},
            "LogFilePrefix": f"{construct_id}/",
        }


def test_data_buckets_are_versioned_and_drop_lone_delete_markers(default_infra: InfraApp):
    for construct_id in DATA_BUCKETS:
        _, body = bucket(default_infra.storage_template, construct_id)
        assert body["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}
        assert lifecycle_rule(body, "LoneDeleteMarkers") == {
            "Id": "LoneDeleteMarkers",
            "ExpiredObjectDeleteMarker": True,
            "Status": "Enabled",
        }


def test_dataset_and_artifacts_keep_noncurrent_versions_30_days(default_infra: InfraApp):
    for construct_id in ("DatasetBucket", "ArtifactBucket"):
        _, body = bucket(default_infra.storage_template, construct_id)
        assert lifecycle_rule(body)["NoncurrentVersionExpiration"] == {"NoncurrentDays": 30}
        assert "ExpirationInDays" not in lifecycle_rule(body)


@pytest.mark.parametrize("variant", ["default_infra", "az_id_nat_scratch"])
def test_checkpoints_expire_and_stay_restorable_for_the_configured_days(variant: str, request):
    """Current checkpoints expire after retention_days; a deleted or overwritten one (a noncurrent version)
    stays restorable for noncurrent_version_days."""
    infra: InfraApp = request.getfixturevalue(variant)
    _, body = bucket(infra.storage_template, "CheckpointBucket")
    checkpoints = infra.settings.checkpoints
    assert body["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}
    assert lifecycle_rule(body)["ExpirationInDays"] == checkpoints.retention_days
    assert lifecycle_rule(body)["NoncurrentVersionExpiration"] == {
        "NoncurrentDays": checkpoints.noncurrent_version_days
    }


def test_checkpoint_days_differ_between_variants(default_infra: InfraApp, az_id_nat_scratch: InfraApp):
    """Guards the test above: the two configs really differ, so the values come from the config."""
    default, variant = default_infra.settings.checkpoints, az_id_nat_scratch.settings.checkpoints
    assert default.retention_days != variant.retention_days
    assert default.noncurrent_version_days != variant.noncurrent_version_days


# --- FSx for Lustre ------------------------------------------------------------------------------


def lustre(infra: InfraApp) -> tuple[dict[str, Any], dict[str, Any]]:
    file_system = only(infra.storage_template, "AWS::FSx::FileSystem")
    return file_system, file_system["Properties"]["LustreConfiguration"]


@pytest.mark.parametrize("variant", ["default_infra", "az_id_nat_scratch", "imported_vpc_persistent_500"])
def test_file_system_follows_the_sizing_plan(variant: str, request):
    infra: InfraApp = request.getfixturevalue(variant)
    plan = infra.settings.fsx_plan
    file_system, configuration = lustre(infra)
    assert file_system["Properties"]["StorageCapacity"] == plan.storage_capacity_gib
    assert configuration["DeploymentType"] == plan.deployment_type
    assert configuration.get("PerUnitStorageThroughput") == plan.per_unit_storage_throughput
    assert file_system["Properties"]["FileSystemTypeVersion"] == "2.15"
    assert configuration["DataCompressionType"] == "LZ4"
    assert file_system["DeletionPolicy"] == file_system["UpdateReplacePolicy"] == "Retain"


def test_a_need_for_500_per_tib_gets_persistent_2_at_500(imported_vpc_persistent_500: InfraApp):
    file_system, configuration = lustre(imported_vpc_persistent_500)
    assert (configuration["DeploymentType"], configuration["PerUnitStorageThroughput"]) == (
        "PERSISTENT_2",
        500,
    )
    assert file_system["Properties"]["StorageCapacity"] == 2400
    assert configuration["MetadataConfiguration"] == {"Mode": "AUTOMATIC"}


def associations(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The file system's data repository associations by FileSystemPath."""
    found = resources(template, "AWS::FSx::DataRepositoryAssociation").values()
    return {body["Properties"]["FileSystemPath"]: body["Properties"] for body in found}


fsx_store_scratch = infra_fixture("fsx_store_scratch", {**AZ_ID_NAT_SCRATCH, **FSX_STORE})


def test_persistent_2_links_the_dataset_prefix_at_the_root_as_every_release_did(default_infra: InfraApp):
    """Without the fsx store, one association at / under the logical id every release gave it: an upgrade
    replaces no association (tests/upgrades)."""
    template = default_infra.storage_template
    _, configuration = lustre(default_infra)
    assert "ImportPath" not in configuration
    assert list(resources(template, "AWS::FSx::DataRepositoryAssociation")) == ["DatasetAssociation"]
    association = associations(template)["/"]
    dataset_bucket, _ = bucket(template, "DatasetBucket")
    assert association["FileSystemId"] == {"Ref": next(iter(resources(template, "AWS::FSx::FileSystem")))}
    assert association["DataRepositoryPath"] == {
        "Fn::Join": ["", ["s3://", {"Ref": dataset_bucket}, "/datasets/"]]
    }
    assert association["S3"] == {
        "AutoImportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]}
    }  # never exports


@pytest.mark.parametrize("variant", ["fsx_store_infra", "fsx_store_scratch"])
def test_checkpoints_on_the_file_system_are_exported_to_the_checkpoint_bucket(variant: str, request):
    """With the fsx store: /checkpoints -> s3://<checkpoints>/fsx-checkpoints/, new, changed and deleted files
    exported (pruning deletes in S3 too), nothing imported; beside the dataset's association at /dataset, not
    within it, on PERSISTENT_2 and SCRATCH_2 alike (automatic export: every Lustre 2.12/2.15 deployment type
    but scratch 1)."""
    template = request.getfixturevalue(variant).storage_template
    linked = associations(template)
    assert sorted(linked) == ["/checkpoints", "/dataset"]
    checkpoints = linked["/checkpoints"]
    checkpoint_bucket, _ = bucket(template, "CheckpointBucket")
    assert checkpoints["DataRepositoryPath"] == {
        "Fn::Join": ["", ["s3://", {"Ref": checkpoint_bucket}, "/fsx-checkpoints/"]]
    }
    assert checkpoints["S3"] == {"AutoExportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]}}
    assert checkpoints["BatchImportMetaDataOnCreate"] is False


def test_scratch_without_the_fsx_store_or_the_trigger_links_by_import_path(az_id_nat_scratch: InfraApp):
    """As every release linked SCRATCH_2 (ImportPath is create-only: another link would replace the file
    system on upgrade); the trigger's import reports and the fsx store need associations instead."""
    template = az_id_nat_scratch.storage_template
    _, configuration = lustre(az_id_nat_scratch)
    assert configuration["DeploymentType"] == "SCRATCH_2"
    assert configuration["ImportPath"] == "s3://existing-training-data/corpus/v2/"
    assert configuration["AutoImportPolicy"] == "NEW_CHANGED_DELETED"
    assert associations(template) == {}
    # The existing bucket is used, not created: only checkpoints, artifacts and logs are new.
    assert len(resources(template, "AWS::S3::Bucket")) == 3
    assert template["Outputs"]["DatasetBucketName"]["Value"] == "existing-training-data"


def test_scratch_with_the_fsx_store_links_the_dataset_by_association(fsx_store_scratch: InfraApp):
    """Not by the legacy ImportPath, whose export path (s3://bucket/FSxLustre<time>) no import report under
    the dataset prefix lies within (CompletionReport.Path, botocore's fsx model)."""
    _, configuration = lustre(fsx_store_scratch)
    assert not {"ImportPath", "ExportPath", "AutoImportPolicy"} & configuration.keys()
    association = associations(fsx_store_scratch.storage_template)["/dataset"]
    assert association["DataRepositoryPath"] == "s3://existing-training-data/corpus/v2/"
    assert association["S3"] == {"AutoImportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]}}


def test_fsx_disabled_creates_no_file_system(imported_vpc_nat_no_fsx: InfraApp):
    template = imported_vpc_nat_no_fsx.storage_template
    assert not resources(template, "AWS::FSx::FileSystem")
    assert "FileSystemId" not in template["Outputs"]
    storage = imported_vpc_nat_no_fsx.storage
    assert (
        storage.file_system is None
        and storage.file_system_id is None
        and storage.file_system_mount_name is None
    )


def test_outputs_name_buckets_and_file_system(default_infra: InfraApp):
    outputs = default_infra.storage_template["Outputs"]
    assert {
        "DatasetBucketName",
        "CheckpointBucketName",
        "ArtifactBucketName",
        "AccessLogBucketName",
        "DatasetUri",
        "FileSystemId",
        "FileSystemMountName",
    } <= set(outputs)
    assert outputs["FileSystemMountName"]["Value"] == {"Fn::GetAtt": ["FileSystem", "LustreMountName"]}


DATASET_KEY = "arn:aws:kms:us-east-1:111111111111:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def sagemaker_role_statements(template: dict[str, Any]) -> list[dict[str, Any]]:
    [role] = [
        name for name in resources(template, "AWS::IAM::Role") if name.startswith("SageMakerExecutionRole")
    ]
    return [
        statement
        for body in resources(template, "AWS::IAM::Policy").values()
        if {"Ref": role} in body["Properties"]["Roles"]
        for statement in body["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_an_sse_kms_dataset_bucket_can_be_read_by_training_jobs(make_settings, default_app, tmp_path):
    """dataset.kms_key_arn: the SageMaker execution role may decrypt with the existing bucket's key."""
    from tests.conftest import synthesize

    settings = make_settings({"dataset": {"bucket_name": "kms-training-data", "kms_key_arn": DATASET_KEY}})
    stacks, assembly = synthesize(settings, tmp_path)
    template = assembly.get_stack_by_name(stacks.pipeline.stack_name).template
    key_statements = [s for s in sagemaker_role_statements(template) if s["Resource"] == DATASET_KEY]
    assert [s["Action"] for s in key_statements] == ["kms:Decrypt"]
    # The default config (a bucket the stack creates, SSE-S3) grants no KMS action.
    _, default_stacks, default_assembly = default_app
    default_template = default_assembly.get_stack_by_name(default_stacks.pipeline.stack_name).template
    assert not [s for s in sagemaker_role_statements(default_template) if "kms:" in json.dumps(s["Action"])]


def test_a_dataset_key_without_an_existing_bucket_is_refused(make_settings):
    from trainstack.config_loading import ConfigError

    with pytest.raises(ConfigError) as raised:
        make_settings({"dataset": {"kms_key_arn": DATASET_KEY}})
    assert "kms_key_arn is the key of an existing SSE-KMS bucket: set bucket_name too" in str(raised.value)
