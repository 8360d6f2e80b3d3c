"""The deploy review on small hand-made templates (trainstack/deploy_findings.py): each kind of finding,
nested properties that only the CDK CLI's specification marks as replacing, and what is not a finding."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import boto3

from trainstack.app_templates import read_deployed
from trainstack.cli import main
from trainstack.deploy_changes import REPLACED, UPDATED, resource_changes, strip_build_noise
from trainstack.deploy_findings import findings, refusal, refused

SUBNET = {
    "Type": "AWS::EC2::Subnet",
    "Properties": {"VpcId": "vpc-1", "CidrBlock": "10.0.0.0/24", "AvailabilityZone": "us-east-1a"},
}
NETWORK = {
    "Resources": {"Subnet": SUBNET},
    "Outputs": {"SubnetId": {"Value": {"Ref": "Subnet"}}},
}
FILE_SYSTEM = {
    "Type": "AWS::FSx::FileSystem",
    "Properties": {
        "FileSystemType": "LUSTRE",
        "StorageCapacity": 1200,
        "SubnetIds": [{"Fn::GetStackOutput": {"StackName": "net", "OutputName": "SubnetId"}}],
        "LustreConfiguration": {"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 250},
    },
    "DeletionPolicy": "Retain",
    "UpdateReplacePolicy": "Retain",
}
BUCKET = {
    "Type": "AWS::S3::Bucket",
    "Properties": {"VersioningConfiguration": {"Status": "Enabled"}},
    "DeletionPolicy": "Retain",
    "UpdateReplacePolicy": "Retain",
}
DATASET = {"Fn::Join": ["", ["s3://", {"Ref": "DatasetBucket9BE8B15B"}, "/datasets/"]]}


def association(path: str, s3: Any = DATASET) -> dict[str, Any]:
    return {
        "Type": "AWS::FSx::DataRepositoryAssociation",
        "Properties": {
            "FileSystemId": {"Ref": "FileSystem"},
            "FileSystemPath": path,
            "DataRepositoryPath": s3,
        },
    }


def app() -> dict[str, Any]:
    storage = {
        "Resources": {
            "FileSystem": FILE_SYSTEM,
            "DatasetBucket9BE8B15B": BUCKET,
            "DatasetAssociation": association("/"),
        }
    }
    return copy.deepcopy({"net": NETWORK, "storage": storage})


def sentences(old, new) -> list[str]:
    return [finding.sentence for finding in findings(old, new)]


def test_the_same_app_has_no_change_and_no_finding():
    assert resource_changes(app(), app()) == []


def test_a_deployment_type_change_replaces_the_file_system_and_says_what_is_at_stake():
    new = app()
    new["storage"]["Resources"]["FileSystem"]["Properties"]["LustreConfiguration"]["DeploymentType"] = (
        "SCRATCH_2"
    )
    association, sentence = sentences(app(), new)
    assert sentence.startswith(
        "storage FileSystem (AWS::FSx::FileSystem) would be REPLACED by the change to "
        "LustreConfiguration.DeploymentType"
    )
    # The association names the file system: a new file system gets a new one.
    assert association.startswith(
        "storage DatasetAssociation (AWS::FSx::DataRepositoryAssociation) would be "
    )
    assert "REPLACED by the change to FileSystemId" in association
    assert "a new, empty file system; the old one (its files" in sentence
    assert "is retained outside the stack, unmanaged, and keeps billing" in sentence


def test_where_the_two_sources_disagree_the_change_is_a_replacement_that_names_both():
    """PerUnitStorageThroughput and ObjectLockEnabled: the CDK CLI's specification says replacement,
    cfn-lint's registry schema does not list them as create-only (issue 46)."""
    new = app()
    new["storage"]["Resources"]["FileSystem"]["Properties"]["LustreConfiguration"][
        "PerUnitStorageThroughput"
    ] = 500
    new["storage"]["Resources"]["DatasetBucket9BE8B15B"]["Properties"]["ObjectLockEnabled"] = True
    found = sentences(app(), new)
    disagreement = (
        "the CDK CLI's resource specification says replacement, cfn-lint's registry schema says update in "
        "place: treated as a replacement"
    )
    found = [sentence for sentence in found if "DatasetAssociation" not in sentence.split(" (")[0]]
    assert len(found) == 2
    assert all(disagreement in sentence for sentence in found), found
    assert any("LustreConfiguration.PerUnitStorageThroughput" in sentence for sentence in found)
    assert any(
        "DatasetBucket9BE8B15B (AWS::S3::Bucket) would be REPLACED by the change to ObjectLockEnabled"
        in sentence
        for sentence in found
    )


def test_a_replaced_subnet_replaces_the_file_system_in_another_stack_through_its_output():
    new = app()
    new["net"]["Resources"]["Subnet"]["Properties"]["AvailabilityZone"] = "us-east-1b"
    _, sentence, skipped = sentences(app(), new)
    # The storage template's text is the same: the CDK CLI would not even deploy it.
    assert skipped.startswith("storage reads net.SubnetId, which this deploy changes")
    assert sentence.startswith(
        "storage FileSystem (AWS::FSx::FileSystem) would be REPLACED by the change to SubnetIds"
    )


def test_build_noise_and_in_place_updates_are_no_finding():
    old, new = app(), app()
    function = {"Type": "AWS::Lambda::Function", "Properties": {"Code": {"S3Key": "aaaa.zip"}, "Role": "r"}}
    old["storage"]["Resources"]["Handler"] = function
    new["storage"]["Resources"]["Handler"] = copy.deepcopy(function)
    new["storage"]["Resources"]["Handler"]["Properties"]["Code"]["S3Key"] = "bbbb.zip"  # a new asset hash
    new["storage"]["Resources"]["DatasetBucket9BE8B15B"]["Properties"]["VersioningConfiguration"][
        "Status"
    ] = "Suspended"
    new["storage"]["Resources"]["CDKMetadata"] = {
        "Type": "AWS::CDK::Metadata",
        "Properties": {"Analytics": "x"},
    }
    new["storage"]["Resources"]["FileSystem"]["Metadata"] = {"aws:cdk:path": "storage/FileSystem"}
    new = {stack: strip_build_noise(template) for stack, template in new.items()}
    assert {(change.logical_id, change.action) for change in resource_changes(old, new)} == {
        ("Handler", UPDATED),
        ("DatasetBucket9BE8B15B", UPDATED),
    }
    assert sentences(old, new) == []


def test_a_removed_bucket_and_a_bucket_moved_to_a_new_logical_id_are_named():
    removed = app()
    del removed["storage"]["Resources"]["DatasetBucket9BE8B15B"]
    [sentence] = sentences(app(), removed)
    assert sentence == (
        "storage DatasetBucket9BE8B15B (AWS::S3::Bucket) would be REMOVED: it is retained outside the stack, "
        "unmanaged, and keeps billing, with its objects."
    )
    old, moved = app(), app()
    for template in (old, moved):
        template["storage"]["Resources"]["DatasetBucket9BE8B15B"]["Properties"]["BucketName"] = "team-data"
    moved["storage"]["Resources"]["DataBucket"] = moved["storage"]["Resources"].pop("DatasetBucket9BE8B15B")
    [sentence] = sentences(old, moved)
    assert (
        "would MOVE to storage DataBucket, a new logical id: creating it fails because the old one still "
        "holds the name team-data" in sentence
    )


def test_a_fixed_name_created_again_in_another_stack_fails_on_the_name():
    """The pipeline stack left out of the app still holds its table's name: a new stack cannot take it."""
    table = {
        "Type": "AWS::DynamoDB::Table",
        "Properties": {"TableName": "trainstack-run-names"},
        "DeletionPolicy": "Retain",
    }
    old = {"pipeline": {"Resources": {"RunNames": copy.deepcopy(table)}}}
    new = {"queue": {"Resources": {"RunNames": copy.deepcopy(table)}}}
    taken, left = sentences(old, new)
    assert taken == (
        "queue RunNames (AWS::DynamoDB::Table) would be created with the fixed name trainstack-run-names, "
        'which pipeline RunNames still holds: the deploy fails with "already exists".'
    )
    assert left.startswith("pipeline is no longer in the app")


def test_names_unique_within_their_parent_conflict_only_on_the_same_parent():
    """An inline policy's name is unique per role (IAM), a metric filter's per log group (CloudWatch Logs): a
    new stack's policy on its own role takes no name from the old stack's role."""

    def policy(role: str) -> dict[str, Any]:
        return {"Type": "AWS::IAM::Policy", "Properties": {"PolicyName": "Default", "Roles": [role]}}

    old = {"pipeline": {"Resources": {"Policy": policy("trainstack-pipeline")}}}
    assert sentences(old, {**old, "team": {"Resources": {"Policy": policy("trainstack-team")}}}) == []
    taken = sentences(old, {**old, "team": {"Resources": {"Policy": policy("trainstack-pipeline")}}})
    assert len(taken) == 1 and "would be created with the fixed name" in taken[0]


def test_associations_that_would_exist_together_during_the_update_are_refused():
    """The releases' dataset association at / and today's /dataset + /checkpoints: created before the old one
    is deleted, both new ones conflict with it (DESIGN: CreateDataRepositoryAssociation)."""
    new = app()
    resources = new["storage"]["Resources"]
    del resources["DatasetAssociation"]
    resources["LinksDatasetAssociationAA2B4710"] = association("/dataset")
    resources["LinksCheckpointAssociationD7328E70"] = association("/checkpoints", "s3://checkpoints/fsx/")
    found = findings(app(), new)
    conflicts = [finding for finding in found if "FSx refuses it" in finding.sentence]
    assert {finding.logical_id for finding in conflicts} == {
        "LinksDatasetAssociationAA2B4710",
        "LinksCheckpointAssociationD7328E70",
    }
    assert all(
        "a file system path of / allows one data repository association only" in finding.sentence
        for finding in conflicts
    )
    assert any(
        finding.logical_id == "DatasetAssociation" and "REMOVED" in finding.sentence for finding in found
    )


def test_a_new_path_on_the_same_prefix_replaces_the_association_and_conflicts_with_its_old_self():
    new = app()
    new["storage"]["Resources"]["DatasetAssociation"]["Properties"]["FileSystemPath"] = "/dataset"
    changes = {change.logical_id: change for change in resource_changes(app(), new)}
    assert changes["DatasetAssociation"].action == REPLACED
    assert any(
        "DatasetAssociation (new) and DatasetAssociation (deployed)" in sentence
        for sentence in sentences(app(), new)
    )


def test_a_stack_left_out_of_the_app_is_named_with_what_it_holds():
    new = app()
    del new["storage"]
    [finding] = findings(app(), new)
    assert finding.logical_id is None and finding.short_name == "storage"
    assert finding.sentence.startswith(
        "storage is no longer in the app: `cdk deploy --all` leaves the stack deployed"
    )
    assert "stateful: DatasetAssociation (AWS::FSx::DataRepositoryAssociation), DatasetBucket9BE8B15B" in (
        finding.sentence
    )


def test_the_guard_lets_through_only_what_is_named():
    new = app()
    new["storage"]["Resources"]["FileSystem"]["Properties"]["LustreConfiguration"]["DeploymentType"] = (
        "SCRATCH_2"
    )
    new["storage"]["Resources"]["DatasetBucket9BE8B15B"]["Properties"]["ObjectLockEnabled"] = True
    found = findings(app(), new)
    assert {finding.short_name for finding in found} == {"FileSystem", "DatasetBucket", "DatasetAssociation"}
    assert {finding.short_name for finding in refused(found, {"FileSystem", "DatasetAssociation"})} == {
        "DatasetBucket"
    }
    assert refused(found, {"FileSystem", "storage/DatasetBucket9BE8B15B", "DatasetAssociation"}) == []
    names = ",".join(finding.short_name for finding in found)
    assert refusal(found).endswith(
        f"make deploy ALLOW_REPLACE={names} (trainstack check-config --allow {names})."
    )


def test_the_deployed_templates_are_read_per_stack_with_those_the_app_no_longer_has(aws):
    """make deploy's source: CloudFormation's GetTemplate (Original) for the app's stacks and any other stack
    the project's app names so (a pipeline left out when teams came); other stacks are not read."""
    cloudformation = boto3.client("cloudformation")
    topic = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}
    for stack in ("trainstack-storage", "trainstack-pipeline", "other-pipeline", "trainstack-notes"):
        cloudformation.create_stack(StackName=stack, TemplateBody=json.dumps(topic))
    deployed = read_deployed({"trainstack-storage"}, "trainstack", cloudformation.meta.region_name)
    assert deployed == {"trainstack-storage": topic, "trainstack-pipeline": topic}


def test_check_config_against_the_deployed_stacks_names_a_stack_the_app_left(aws, capsys):
    """make deploy's command: NEW's templates from a directory, OLD from CloudFormation (moto)."""
    release = Path(__file__).resolve().parent / "releases" / "19fc479" / "default"
    topic = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}
    boto3.client("cloudformation").create_stack(StackName="trainstack-queue", TemplateBody=json.dumps(topic))
    command = [
        "check-config",
        str(release / "config.yaml"),
        "--templates",
        str(release),
        "--against-deployed",
    ]
    assert main(command) == 1
    out, err = capsys.readouterr()
    assert "finding: trainstack-queue is no longer in the app" in out
    assert err.strip().endswith(
        "make deploy ALLOW_REPLACE=trainstack-queue (trainstack check-config --allow trainstack-queue)."
    )
    assert main([*command, "--allow", "trainstack-queue"]) == 0


def test_a_policy_of_a_replaced_bucket_follows_it_without_a_name_finding():
    """A bucket policy's identifier is its bucket, not a name of its own: replaced with it, no finding."""
    old, new = app(), app()
    policy = {"Type": "AWS::S3::BucketPolicy", "Properties": {"Bucket": {"Ref": "DatasetBucket9BE8B15B"}}}
    old["storage"]["Resources"]["DatasetBucketPolicy"] = copy.deepcopy(policy)
    new["storage"]["Resources"]["DatasetBucketPolicy"] = copy.deepcopy(policy)
    new["storage"]["Resources"]["DatasetBucket9BE8B15B"]["Properties"]["ObjectLockEnabled"] = True
    changes = {change.logical_id: change.action for change in resource_changes(old, new)}
    assert changes["DatasetBucketPolicy"] == REPLACED
    assert {finding.logical_id for finding in findings(old, new)} == {
        "DatasetBucket9BE8B15B",
        "DatasetAssociation",
    }


def test_a_stack_reading_a_replaced_file_systems_id_through_an_unchanged_template_is_named():
    """Weak cross-stack references: the pipeline's template text stays the same when the file system it
    reads is replaced, and the CDK CLI skips deploying an unchanged template."""
    old, new = app(), app()
    for template in (old, new):
        template["storage"]["Outputs"] = {"FileSystemId": {"Value": {"Ref": "FileSystem"}}}
        reads = {"Fn::GetStackOutput": {"StackName": "storage", "OutputName": "FileSystemId"}}
        machine = {
            "Type": "AWS::StepFunctions::StateMachine",
            "Properties": {"DefinitionSubstitutions": {"Fs": reads}},
        }
        template["pipeline"] = {"Resources": {"Pipeline": machine}}
    new["storage"]["Resources"]["FileSystem"]["Properties"]["LustreConfiguration"]["DeploymentType"] = (
        "SCRATCH_2"
    )
    skipped = [finding for finding in findings(old, new) if finding.stack == "pipeline"]
    assert [finding.sentence for finding in skipped] == [
        "pipeline reads storage.FileSystemId, which this deploy changes, but its own template stays the "
        "same: `cdk deploy` skips an unchanged stack, so it keeps the old values until `cdk deploy --force "
        "pipeline` deploys it again."
    ]
