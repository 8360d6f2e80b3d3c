"""`encryption:` (trainstack/encryption_settings.py) as synthesized: the run buckets, the pipeline's log
groups and requests under one customer managed key, its key policy for CloudWatch Logs, and the one key of
control-tower."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NO_ENV, deep_merge, default_config_data, synthesize
from tests.infra.conftest import infra_fixture
from tests.infra.control_tower import failed_rules
from tests.infra.templates import load_templates, resources
from tests.infra.test_app_quality import run_cfn_lint
from tests.infra.test_governed import GOVERNED, control_tower  # noqa: F401 (a fixture)

EXISTING_KEY = "arn:aws:kms:us-east-1:111111111111:key/0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
CREATED_KEY = {"encryption": {"customer_managed_key": True}}
# A profile on an instance type without instance store volumes: its requests carry VolumeKmsKeyId too.
EBS_ONLY_PROFILE = {
    "name": "cpu-smoke",
    "strategy": "torchrun",
    "instance_preferences": [{"instance_type": "ml.m5.xlarge"}],
    "hyperparameters": {"model_preset": "125m"},
    "inter_container_traffic_encryption": True,
}


def with_run_data_key(data: dict[str, Any], encryption: dict[str, Any] = CREATED_KEY) -> dict[str, Any]:
    """The config with the run data key and a profile whose jobs can take a volume key."""
    merged = deep_merge(data, encryption)
    return {**merged, "profiles": [*merged["profiles"], EBS_ONLY_PROFILE]}


@pytest.fixture(scope="session")
def encrypted_app(tmp_path_factory):
    """The whole app with a key the storage stack creates: (settings, templates by stack name)."""
    from trainstack.config_loading import parse_settings

    settings = parse_settings(with_run_data_key(default_config_data()), NO_ENV, source="run data key")
    _, assembly = synthesize(settings, tmp_path_factory.mktemp("run-data-key.cdk.out"))
    return settings, load_templates(Path(assembly.directory)), Path(assembly.directory)


existing_key_infra = infra_fixture("existing-key", {"encryption": {"kms_key_arn": EXISTING_KEY}})
governed_key_infra = infra_fixture("governed-key", deep_merge(GOVERNED, CREATED_KEY))


def _buckets(template: dict[str, Any]) -> dict[str, Any]:
    return {
        logical_id.rstrip("0123456789ABCDEF"): body["Properties"]["BucketEncryption"][
            "ServerSideEncryptionConfiguration"
        ][0]
        for logical_id, body in resources(template, "AWS::S3::Bucket").items()
    }


def _sse_kms(key: Any) -> dict[str, Any]:
    return {
        "BucketKeyEnabled": True,
        "ServerSideEncryptionByDefault": {"KMSMasterKeyID": key, "SSEAlgorithm": "aws:kms"},
    }


def test_checkpoints_and_artifacts_are_sse_kms_with_bucket_keys_under_the_created_key(encrypted_app):
    _, templates, _ = encrypted_app
    storage = templates["trainstack-storage"]
    [key_id] = resources(storage, "AWS::KMS::Key")
    key = resources(storage, "AWS::KMS::Key")[key_id]["Properties"]
    assert key["EnableKeyRotation"] is True
    buckets = _buckets(storage)
    for run_bucket in ("CheckpointBucket", "ArtifactBucket"):
        assert buckets[run_bucket] == _sse_kms({"Fn::GetAtt": [key_id, "Arn"]}), run_bucket
    # FSx imports the dataset and S3 delivers access logs: both stay on S3-managed keys (storage_stack.py).
    s3_managed = {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
    assert buckets["DatasetBucket"] == buckets["AccessLogBucket"] == s3_managed


def test_every_pipeline_log_group_is_encrypted_with_the_key_that_lets_cloudwatch_logs_use_it(encrypted_app):
    _, templates, _ = encrypted_app
    storage, pipeline = templates["trainstack-storage"], templates["trainstack-pipeline"]
    [key] = resources(storage, "AWS::KMS::Key").values()
    [logs_statement] = [
        statement
        for statement in key["Properties"]["KeyPolicy"]["Statement"]
        if statement.get("Principal", {}).get("Service") == "logs.us-east-1.amazonaws.com"
    ]
    assert logs_statement["Effect"] == "Allow"
    assert sorted(logs_statement["Action"]) == [
        "kms:Decrypt*",
        "kms:Encrypt*",
        "kms:GenerateDataKey*",
        "kms:ReEncrypt*",
    ]
    pattern = logs_statement["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"]
    assert pattern == "arn:aws:logs:us-east-1:111111111111:log-group:/aws/vendedlogs/states/trainstack-*"
    log_groups = resources(pipeline, "AWS::Logs::LogGroup").values()
    assert len(log_groups) >= 5  # pipeline, attempt, registration, cleanup, sweeper
    for log_group in log_groups:
        properties = log_group["Properties"]
        arn = f"arn:aws:logs:us-east-1:111111111111:log-group:{properties['LogGroupName']}"
        assert fnmatch.fnmatchcase(arn, pattern), arn
        output = properties["KmsKeyId"]["Fn::GetStackOutput"]
        assert output["StackName"] == "trainstack-storage" and "RunDataKey" in output["OutputName"]


def test_the_pipeline_requests_carry_the_key_and_the_profile_that_asks_encrypts_its_traffic(encrypted_app):
    _, templates, _ = encrypted_app
    [pipeline] = [
        body["Properties"]
        for body in resources(templates["trainstack-pipeline"], "AWS::StepFunctions::StateMachine").values()
        if body["Properties"]["StateMachineName"] == "trainstack-pipeline"
    ]
    assert (
        "RunDataKey"
        in pipeline["DefinitionSubstitutions"]["RunDataKeyArn"]["Fn::GetStackOutput"]["OutputName"]
    )
    definition = json.dumps(pipeline["DefinitionString"])
    # JSON inside a JSONata literal inside the definition: the quotes arrive escaped three times.
    quote = '\\\\\\"'
    key = f"{quote}${{RunDataKeyArn}}{quote}"
    output_keys = definition.count(f"{quote}KmsKeyId{quote}:{key}")
    assert output_keys == len(encrypted_app[0].profiles)
    # cpu-smoke's m5 alone (instance store elsewhere): its request, its ResourceConfig for an instanceCount.
    assert definition.count(f"{quote}VolumeKmsKeyId{quote}:{key}") == 2
    assert definition.count(f"{quote}EnableInterContainerTrafficEncryption{quote}:true") == 1


def test_the_encrypted_app_passes_cfn_lint(encrypted_app):
    _, _, outdir = encrypted_app
    result = run_cfn_lint(sorted(outdir.glob("*.template.json")))
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_an_existing_key_encrypts_the_run_buckets_and_no_key_is_created(existing_key_infra):
    storage = existing_key_infra.storage_template
    assert resources(storage, "AWS::KMS::Key") == {}
    buckets = _buckets(storage)
    assert buckets["CheckpointBucket"] == buckets["ArtifactBucket"] == _sse_kms(EXISTING_KEY)


def test_control_tower_keeps_one_key_for_every_bucket_and_the_runs(governed_key_infra):
    """With control-tower the buckets' key is the run data key: no second key guards the same objects."""
    storage = governed_key_infra.storage_template
    [key_id] = resources(storage, "AWS::KMS::Key")
    assert key_id.startswith("BucketKey")
    assert governed_key_infra.storage.run_data_key is governed_key_infra.storage.encryption_key
    buckets = _buckets(storage)
    for name in ("DatasetBucket", "CheckpointBucket", "ArtifactBucket"):
        assert buckets[name] == _sse_kms({"Fn::GetAtt": [key_id, "Arn"]}), name


def test_no_encrypted_log_group_skips_checkovs_encryption_check(encrypted_app):
    """CKV_AWS_158's project-wide skip says the log group has no customer key: untrue for these."""
    _, templates, _ = encrypted_app
    for log_group in resources(templates["trainstack-pipeline"], "AWS::Logs::LogGroup").values():
        skips = log_group.get("Metadata", {}).get("checkov", {}).get("skip", [])
        assert "CKV_AWS_158" not in {skip["id"] for skip in skips}


def test_control_tower_with_the_key_passes_every_rule_and_pins_its_bucket_key(tmp_path, control_tower):  # noqa: F811
    """The governed app with `customer_managed_key: true`: synth runs cdk-nag and the Control Tower rules
    (and fails on a finding); the attempt may create only jobs under the bucket key."""
    from trainstack.config_loading import parse_settings

    data = with_run_data_key(deep_merge(default_config_data(), GOVERNED))
    settings = parse_settings(data, NO_ENV, source="governed with the run data key")
    _, assembly = synthesize(settings, tmp_path)
    paths = sorted(Path(assembly.directory).glob("*.template.json"))
    assert all(rules == set() for rules in failed_rules(*control_tower, paths).values())
    pipeline = load_templates(Path(assembly.directory))["trainstack-pipeline"]
    denies = [
        statement
        for policy in resources(pipeline, "AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Effect"] == "Deny" and statement["Action"] == "sagemaker:CreateTrainingJob"
    ]
    assert len(denies) == 2
    for statement in denies:
        key = statement["Condition"]["ArnNotEquals"]
        assert "BucketKey" in json.dumps(key), key
