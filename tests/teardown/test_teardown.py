"""`make teardown` in moto: stacks deleted pipelines -> queue -> image -> storage -> network, the retained
resources listed with what they keep costing, and nothing retained deleted unless the operator names it.

moto's CloudFormation honours DeletionPolicy: Retain (the bucket, table, repository, log group stay) but
creates no AWS::FSx::FileSystem and no AWS::SageMaker::ModelPackageGroup (it warns and leaves the physical id
empty): the retained file system is made with moto's FSx API and added to the storage stack's retained
resources by FakeFileSystemTeardown below, and model package groups are not exercised here."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest

from tests.conftest import REPO_ROOT
from trainstack.config_loading import load_settings
from trainstack.teardown import (
    DELETABLE_TYPES,
    FILE_SYSTEM,
    RETAIN_POLICIES,
    Retained,
    Teardown,
    TeardownError,
    deployment_stacks,
)

REGION = "us-east-1"
TEAMS = load_settings(str(REPO_ROOT / "config/examples/teams.yaml"))
RETAIN = {"DeletionPolicy": "Retain", "UpdateReplacePolicy": "Retain"}
TABLE = {
    "BillingMode": "PAY_PER_REQUEST",
    "AttributeDefinitions": [{"AttributeName": "name", "AttributeType": "S"}],
    "KeySchema": [{"AttributeName": "name", "KeyType": "HASH"}],
}
# teams.yaml's six stacks, each with one resource of a type that stack retains as synthesized (those moto's
# CloudFormation creates: not the directory buckets or model package groups) and stand-ins for the rest.
TEMPLATES = {
    "trainstack-network": {
        "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.20.0.0/16"}},
        "FlowLogGroup": {"Type": "AWS::Logs::LogGroup", **RETAIN},
    },
    "trainstack-storage": {
        "DatasetBucket": {"Type": "AWS::S3::Bucket", **RETAIN},
        "Scratch": {"Type": "AWS::SQS::Queue"},
    },
    "trainstack-image": {
        "Repository": {
            "Type": "AWS::ECR::Repository",
            **RETAIN,
            "Properties": {"RepositoryName": "trainstack-training"},
        },
    },
    "trainstack-queue": {
        "RunNames": {
            "Type": "AWS::DynamoDB::Table",
            **RETAIN,
            "Properties": {"TableName": "run-names", **TABLE},
        },
    },
    "trainstack-research-pipeline": {"Topic": {"Type": "AWS::SNS::Topic"}},
    "trainstack-search-pipeline": {"Topic": {"Type": "AWS::SNS::Topic"}},
}


class FsxWithExportTasks:
    """moto's FSx plus the data repository task calls it lacks. As the FSx API reference describes them,
    CreateDataRepositoryTask answers the task with its TaskId and DescribeDataRepositoryTasks its Lifecycle
    (PENDING, EXECUTING, then SUCCEEDED, FAILED or CANCELED, with FailureDetails.Message on failure); the
    sequence of lifecycles each test gives is assumed."""

    def __init__(self, fsx, lifecycles: list[str]) -> None:
        self._fsx, self._lifecycles, self.requests = fsx, iter(lifecycles), []

    def __getattr__(self, name: str):
        return getattr(self._fsx, name)

    def create_data_repository_task(self, **request):
        self.requests.append(request)
        return {"DataRepositoryTask": {"TaskId": "task-0123456789abcdef0", "Lifecycle": "PENDING"}}

    def describe_data_repository_tasks(self, TaskIds):  # noqa: N803 (botocore's parameter name)
        lifecycle = next(self._lifecycles)
        task = {"TaskId": TaskIds[0], "Lifecycle": lifecycle}
        if lifecycle == "FAILED":
            task["FailureDetails"] = {"Message": "the linked bucket refused the export"}
        return {"DataRepositoryTasks": [task]}


class FakeFileSystemTeardown(Teardown):
    """Teardown whose storage stack also retains `file_system_id` (moto's CloudFormation makes none)."""

    file_system_id = ""

    def retained_resources(self, stack: str) -> list[Retained]:
        found = super().retained_resources(stack)
        if stack == "trainstack-storage":
            found.append(Retained(stack, FILE_SYSTEM, self.file_system_id))
        return found


@pytest.fixture
def deployment(aws):
    """teams.yaml's six stacks in moto, a 1,200 GiB PERSISTENT_2 file system, an object in the bucket."""
    cloudformation = boto3.client("cloudformation", region_name=REGION)
    for stack, resources in TEMPLATES.items():
        cloudformation.create_stack(StackName=stack, TemplateBody=json.dumps({"Resources": resources}))
    file_system = boto3.client("fsx", region_name=REGION).create_file_system(
        FileSystemType="LUSTRE",
        StorageCapacity=1200,
        SubnetIds=["subnet-0123456789abcdef0"],
        LustreConfiguration={"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 1000},
    )["FileSystem"]["FileSystemId"]
    FakeFileSystemTeardown.file_system_id = file_system
    [bucket] = [b["Name"] for b in boto3.client("s3", region_name=REGION).list_buckets()["Buckets"]]
    boto3.client("s3", region_name=REGION).put_object(Bucket=bucket, Key="datasets/a.bin", Body=b"x")
    return cloudformation, file_system, bucket


def run_teardown(fsx_lifecycles: list[str] | None = None, **kwargs):
    said: list[str] = []
    answers = iter(kwargs.pop("answers", []))
    teardown = FakeFileSystemTeardown(
        boto3.Session(), TEAMS, say=said.append, confirm=lambda _: next(answers), sleep=lambda _: None
    )
    if fsx_lifecycles is not None:
        fsx = FsxWithExportTasks(teardown.client("fsx"), fsx_lifecycles)
        moto_client = teardown.client
        teardown.client = lambda service: fsx if service == "fsx" else moto_client(service)
        kwargs.setdefault("assume_yes", True)
    teardown.run(**kwargs)
    return said, (fsx.requests if fsx_lifecycles is not None else None)


def remaining_stacks(cloudformation) -> list[str]:
    return sorted(
        summary["StackName"]
        for summary in cloudformation.list_stacks()["StackSummaries"]
        if summary["StackStatus"] != "DELETE_COMPLETE"
    )


def test_the_order_pipelines_queue_image_storage_network():
    assert deployment_stacks(TEAMS) == [
        "trainstack-research-pipeline",
        "trainstack-search-pipeline",
        "trainstack-pipeline",  # a single-team pipeline left from before teams:
        "trainstack-queue",
        "trainstack-image",
        "trainstack-storage",
        "trainstack-network",
    ]


def stacks_each_uses(assembly) -> dict[str, set[str]]:
    """Per synthesized stack, the stacks it uses: CDK's deploy dependencies (manifest) and the producers of
    its cross-stack references (Fn::GetStackOutput)."""

    def referenced(value) -> set[str]:
        if isinstance(value, dict):
            found = {value["Fn::GetStackOutput"]["StackName"]} if "Fn::GetStackOutput" in value else set()
            return found.union(*(referenced(item) for item in value.values()))
        if isinstance(value, list):
            return set().union(*(referenced(item) for item in value))
        return set()

    return {
        stack.stack_name: {dependency.stack_name for dependency in stack.dependencies if is_stack(dependency)}
        | referenced(template_of(stack))
        for stack in assembly.stacks
    }


def is_stack(artifact) -> bool:
    from aws_cdk import cx_api

    return isinstance(artifact, cx_api.CloudFormationStackArtifact)


def template_of(stack) -> dict:
    return json.loads(Path(stack.template_full_path).read_text())


@pytest.mark.parametrize("synthesized", ["default_app", "teams_app"])
def test_the_order_deletes_each_synthesized_stack_before_every_stack_it_uses(synthesized, request):
    """On the real templates: a stack goes before the stacks it takes values from, and every stack the
    config synthesizes is in the order; every resource they retain is one teardown can price and delete."""
    settings, _, assembly = request.getfixturevalue(synthesized)
    order = deployment_stacks(settings)
    uses = stacks_each_uses(assembly)
    assert set(uses) <= set(order)
    assert uses[f"{settings.project}-storage"] == {f"{settings.project}-network"}
    for stack, used in uses.items():
        for producer in used:
            assert order.index(stack) < order.index(producer), (stack, producer)
    retained_types = {
        body["Type"]
        for stack in assembly.stacks
        for body in template_of(stack)["Resources"].values()
        if body.get("DeletionPolicy") in RETAIN_POLICIES
    }
    assert FILE_SYSTEM in retained_types and retained_types <= DELETABLE_TYPES
    teardown = Teardown(boto3.Session(region_name=REGION), settings)
    for kind in retained_types - {FILE_SYSTEM}:  # a file system's cost: the moto tests below
        fixed, words = teardown.monthly_cost(Retained("stack", kind, "id"))
        assert fixed is not None and words != "not priced", kind


def test_the_retained_file_system_keeps_the_network_and_everything_retained_is_listed_with_its_cost(
    deployment,
):
    cloudformation, file_system, bucket = deployment
    said, _ = run_teardown(answers=["trainstack"])
    deleted = [line.removeprefix("deleted ") for line in said if line.startswith("deleted ")]
    assert deleted == [
        "trainstack-research-pipeline",
        "trainstack-search-pipeline",
        "trainstack-queue",
        "trainstack-image",
        "trainstack-storage",
    ]
    assert remaining_stacks(cloudformation) == ["trainstack-network"]
    assert "kept trainstack-network: a retained file system is still in its subnet (above)" in said
    retained = said[
        said.index(
            "retained (delete one with --delete-retained ID; export a file system with --export ID):"
        ) :
    ]
    assert f"  AWS::FSx::FileSystem {file_system} (from trainstack-storage): $720.00/month" in retained
    assert (
        f"  AWS::S3::Bucket {bucket} (from trainstack-storage): what it stores, $0.023/GB-month (S3 Standard)"
        in retained
    )
    assert (
        "  AWS::ECR::Repository trainstack-training (from trainstack-image): its images, $0.10/GB-month"
        in retained
    )
    assert (
        "  AWS::DynamoDB::Table run-names (from trainstack-queue): what it stores, $0.25/GB-month" in retained
    )
    # Fixed: the file system; the rest bills by what it stores.
    assert said[-1] == "the retained resources keep costing $720.00/month, plus what they store"
    # Nothing retained was deleted: the operator named nothing.
    assert boto3.client("s3", region_name=REGION).list_objects_v2(Bucket=bucket)["KeyCount"] == 1
    assert boto3.client("fsx", region_name=REGION).describe_file_systems()["FileSystems"]


def test_a_named_file_system_goes_first_then_the_network_and_the_named_bucket_after_confirmation(deployment):
    cloudformation, file_system, bucket = deployment
    said, _ = run_teardown(delete=[file_system, bucket], answers=["trainstack", file_system, bucket])
    assert remaining_stacks(cloudformation) == []
    assert said.index(f"deleting {FILE_SYSTEM} {file_system} (from trainstack-storage)") < said.index(
        "deleting trainstack-network"
    )
    assert not boto3.client("fsx", region_name=REGION).describe_file_systems()["FileSystems"]
    assert bucket not in [b["Name"] for b in boto3.client("s3", region_name=REGION).list_buckets()["Buckets"]]
    # The flow-log group of the network stack, the repository and the table stay, listed.
    flow_logs = [line for line in said if line.startswith("  AWS::Logs::LogGroup ")]
    assert len(flow_logs) == 1 and flow_logs[0].endswith(
        "(from trainstack-network): what it stores, $0.03/GB-month"
    )


def test_an_exported_file_system_is_exported_before_it_is_deleted(deployment):
    cloudformation, file_system, _ = deployment
    said, requests = run_teardown(
        fsx_lifecycles=["EXECUTING", "SUCCEEDED"], export=[file_system], delete=[file_system]
    )
    assert requests == [
        {"Type": "EXPORT_TO_REPOSITORY", "FileSystemId": file_system, "Report": {"Enabled": False}}
    ]
    assert said.index(f"exported {file_system}") < said.index(
        f"deleting {FILE_SYSTEM} {file_system} (from trainstack-storage)"
    )
    assert remaining_stacks(cloudformation) == []


def test_a_failed_export_keeps_the_file_system_and_the_network(deployment):
    cloudformation, file_system, _ = deployment
    with pytest.raises(
        TeardownError, match=f"the export of {file_system} did not finish \\(the linked bucket"
    ):
        run_teardown(fsx_lifecycles=["FAILED"], export=[file_system], delete=[file_system])
    assert remaining_stacks(cloudformation) == ["trainstack-network"]
    assert boto3.client("fsx", region_name=REGION).describe_file_systems()["FileSystems"]


def test_an_unconfirmed_retained_resource_is_kept(deployment):
    _, _, bucket = deployment
    said, _ = run_teardown(delete=[bucket], answers=["trainstack", "no"])
    assert f"kept AWS::S3::Bucket {bucket} (from trainstack-storage): not confirmed" in said
    assert boto3.client("s3", region_name=REGION).list_objects_v2(Bucket=bucket)["KeyCount"] == 1


def test_a_name_that_is_not_retained_or_a_non_file_system_export_changes_nothing(deployment):
    cloudformation, _, bucket = deployment
    with pytest.raises(TeardownError, match="--delete-retained my-bucket names no retained resource"):
        run_teardown(delete=["my-bucket"], answers=["trainstack"])
    with pytest.raises(TeardownError, match=f"--export {bucket}: only a file system can be exported"):
        run_teardown(export=[bucket], answers=["trainstack"])
    with pytest.raises(TeardownError, match="teardown not confirmed: nothing was deleted"):
        run_teardown(answers=["yes"])
    assert len(remaining_stacks(cloudformation)) == len(TEMPLATES)


def test_runs_in_flight_stop_the_teardown_before_any_deletion(deployment):
    cloudformation, _, _ = deployment
    stepfunctions = boto3.client("stepfunctions", region_name=REGION)
    machine = stepfunctions.create_state_machine(
        name="trainstack-research-pipeline",
        definition=json.dumps(
            {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 3600, "End": True}}}
        ),
        roleArn="arn:aws:iam::123456789012:role/sfn",
    )["stateMachineArn"]
    stepfunctions.start_execution(stateMachineArn=machine, name="run-1")
    cloudformation.delete_stack(StackName="trainstack-research-pipeline")
    cloudformation.create_stack(
        StackName="trainstack-research-pipeline",
        TemplateBody=json.dumps(
            {
                "Resources": TEMPLATES["trainstack-research-pipeline"],
                "Outputs": {"StateMachineArn": {"Value": machine}},
            }
        ),
    )
    with pytest.raises(TeardownError, match=r"trainstack-research-pipeline has runs in flight \(run-1\)"):
        run_teardown(answers=["trainstack"])
    assert len(remaining_stacks(cloudformation)) == len(TEMPLATES)
