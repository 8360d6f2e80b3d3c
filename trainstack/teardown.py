"""`make teardown CONFIG=...` (`python -m trainstack.teardown --config FILE`): remove a deployment's stacks
in an order that works, then say what CloudFormation kept (retained resources), what each keeps costing,
and delete or export only what the operator names (docs/teardown.md).

The order: pipelines (nothing else uses them), the teams' queue (the pipelines submit to it), the image,
the storage, the network (every other stack uses its VPC). The storage stack's file system is retained
and sits in the network's subnet and security group, so the network stack cannot go while it exists:
teardown exports it (--export FS_ID, a data repository task) and deletes it (--delete-retained FS_ID) on
request, or keeps the network stack and says why.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from trainstack.config import Settings
from trainstack.idle_cost import FileSystemSize, file_system_monthly_usd, rate
from trainstack.infra_prices import INFRA_PRICES
from trainstack.pipeline_runs import all_pipeline_runs

RETAIN_POLICIES = frozenset({"Retain", "RetainExceptOnCreate"})
FILE_SYSTEM = "AWS::FSx::FileSystem"
# What the stacks retain, and teardown can delete on request (_delete_retained).
DELETABLE_TYPES = frozenset(
    {
        "AWS::S3::Bucket",
        "AWS::S3Express::DirectoryBucket",
        "AWS::Logs::LogGroup",
        "AWS::ECR::Repository",
        "AWS::DynamoDB::Table",
        "AWS::KMS::Key",
        "AWS::SageMaker::ModelPackageGroup",
        "AWS::StepFunctions::StateMachineVersion",
        "AWS::StepFunctions::StateMachineAlias",
        FILE_SYSTEM,
    }
)
STATE_MACHINE_ARN_OUTPUT = "StateMachineArn"  # stacks/pipeline/pipeline_stack.py's output
EXPORT_TASK_SECONDS = 6 * 3600  # an export of a large file system takes hours
POLL_SECONDS = 30


class TeardownError(Exception):
    """One sentence for the operator; nothing after the failed step was changed."""


@dataclass(frozen=True)
class Retained:
    stack: str
    resource_type: str
    physical_id: str

    def __str__(self) -> str:
        return f"{self.resource_type} {self.physical_id} (from {self.stack})"


def deployment_stacks(settings: Settings) -> list[str]:
    """Every stack the config deploys, in an order CloudFormation can delete them. With teams, the
    single-team `<project>-pipeline` a deployment may still hold from before `teams:` comes first too."""
    project = settings.project
    pipelines = [f"{runs.project}-pipeline" for runs in all_pipeline_runs(settings)]
    if settings.teams:
        pipelines.append(f"{project}-pipeline")
    return [*pipelines, f"{project}-queue", f"{project}-image", f"{project}-storage", f"{project}-network"]


class Teardown:
    def __init__(
        self,
        session: Any,
        settings: Settings,
        *,
        say: Callable[[str], None] = print,
        confirm: Callable[[str], str] = input,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings, self.say, self.confirm, self.sleep = settings, say, confirm, sleep
        self.client = lambda service: session.client(service, region_name=settings.region)
        self.cloudformation = self.client("cloudformation")

    def run(
        self, *, delete: Iterable[str] = (), export: Iterable[str] = (), assume_yes: bool = False
    ) -> None:
        stacks = [stack for stack in deployment_stacks(self.settings) if self._exists(stack)]
        retained = [item for stack in stacks for item in self.retained_resources(stack)]
        delete, export = set(delete), set(export)
        self._check_names(retained, delete, export)
        if not stacks:
            self.say(f"nothing to delete: no stack of {self.settings.project} in {self.settings.region}")
        else:
            self._refuse_runs_in_flight(stacks)
            project = self.settings.project
            question = f"delete {', '.join(stacks)} in {self.settings.region}? type {project} to go on: "
            if not assume_yes and self.confirm(question).strip() != project:
                raise TeardownError("teardown not confirmed: nothing was deleted")
        network = f"{self.settings.project}-network"
        for stack in stacks:
            if stack == network and not self._network_free(retained, delete, export, assume_yes):
                self.say(f"kept {network}: a retained file system is still in its subnet (above)")
                continue
            self._delete_stack(stack)
        self._report_and_delete(retained, delete, assume_yes)

    def retained_resources(self, stack: str) -> list[Retained]:
        """What deleting `stack` leaves behind: its resources whose DeletionPolicy retains them."""
        body = self.cloudformation.get_template(StackName=stack, TemplateStage="Original")["TemplateBody"]
        template = json.loads(body) if isinstance(body, str) else body
        policies = {name: resource.get("DeletionPolicy") for name, resource in template["Resources"].items()}
        pages = self.cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack)
        return [
            Retained(stack, summary["ResourceType"], summary["PhysicalResourceId"])
            for page in pages
            for summary in page["StackResourceSummaries"]
            if policies.get(summary["LogicalResourceId"]) in RETAIN_POLICIES
            and summary.get("PhysicalResourceId")
        ]

    def _exists(self, stack: str) -> bool:
        try:
            found = self.cloudformation.describe_stacks(StackName=stack)["Stacks"]
        except self.cloudformation.exceptions.ClientError as error:
            if "does not exist" in str(error):
                return False
            raise
        return bool(found) and found[0]["StackStatus"] != "DELETE_COMPLETE"

    def _check_names(self, retained: list[Retained], delete: set[str], export: set[str]) -> None:
        known = {item.physical_id: item for item in retained}
        for flag, names in (("--delete-retained", delete), ("--export", export)):
            for name in sorted(names - known.keys()):
                raise TeardownError(
                    f"{flag} {name} names no retained resource of this deployment; its retained resources: "
                    f"{', '.join(sorted(known)) or 'none'}"
                )
        for name in sorted(delete):
            if known[name].resource_type not in DELETABLE_TYPES:
                raise TeardownError(
                    f"--delete-retained {name}: teardown cannot delete a {known[name].resource_type}; "
                    "delete it in the console after the teardown"
                )
        for name in sorted(export):
            if known[name].resource_type != FILE_SYSTEM:
                raise TeardownError(
                    f"--export {name}: only a file system can be exported (to its linked S3 bucket); "
                    f"{known[name].resource_type} keeps its data where it is"
                )

    def _refuse_runs_in_flight(self, stacks: list[str]) -> None:
        """A pipeline deleted under a running execution leaves its training jobs running and billed."""
        stepfunctions = self.client("stepfunctions")
        for stack in stacks:
            outputs = self.cloudformation.describe_stacks(StackName=stack)["Stacks"][0].get("Outputs", [])
            for output in outputs:
                if output["OutputKey"] != STATE_MACHINE_ARN_OUTPUT:
                    continue
                running = stepfunctions.list_executions(
                    stateMachineArn=output["OutputValue"], statusFilter="RUNNING", maxResults=1
                )["executions"]
                if running:
                    raise TeardownError(
                        f"{stack} has runs in flight ({running[0]['name']}): stop them first "
                        "(trainstack stop RUN) or wait; nothing was deleted"
                    )

    def _delete_stack(self, stack: str) -> None:
        self.say(f"deleting {stack}")
        self.cloudformation.delete_stack(StackName=stack)
        waiter = self.cloudformation.get_waiter("stack_delete_complete")
        try:
            waiter.wait(StackName=stack, WaiterConfig={"Delay": POLL_SECONDS, "MaxAttempts": 240})
        except Exception as error:  # botocore's WaiterError: the stack is DELETE_FAILED or still going
            raise TeardownError(
                f"{stack} was not deleted ({error}); `aws cloudformation describe-stack-events --stack-name "
                f"{stack}` says why; run teardown again once it is fixed"
            ) from None
        self.say(f"deleted {stack}")

    def _network_free(self, retained: list[Retained], delete: set[str], export: set[str], yes: bool) -> bool:
        """Export and delete the retained file systems the operator named; True when none is left."""
        fsx = self.client("fsx")
        left = []
        for item in (item for item in retained if item.resource_type == FILE_SYSTEM):
            if not self._file_system(fsx, item.physical_id):
                continue
            if item.physical_id in export:
                self._export(fsx, item.physical_id)
            if item.physical_id in delete and self._confirmed(item, yes):
                self._delete_retained(item)
                self._wait_file_system_gone(fsx, item.physical_id)
                delete.discard(item.physical_id)
            else:
                self.say(
                    f"{item} is in the network stack's subnet and security group: export it "
                    f"(--export {item.physical_id}) and delete it (--delete-retained {item.physical_id}) "
                    "to remove the network stack too"
                )
                left.append(item)
        return not left

    @staticmethod
    def _file_system(fsx: Any, file_system_id: str) -> dict | None:
        try:
            found = fsx.describe_file_systems(FileSystemIds=[file_system_id])["FileSystems"]
        except fsx.exceptions.FileSystemNotFound:  # AWS's answer (FSx API reference); moto answers []
            return None
        return found[0] if found else None

    def _export(self, fsx: Any, file_system_id: str) -> None:
        """Everything the file system holds that its S3 link lacks goes to the linked bucket (an
        EXPORT_TO_REPOSITORY data repository task over every path, FSx for Lustre user guide)."""
        self.say(f"exporting {file_system_id} to its linked S3 bucket")
        task = fsx.create_data_repository_task(
            Type="EXPORT_TO_REPOSITORY", FileSystemId=file_system_id, Report={"Enabled": False}
        )["DataRepositoryTask"]
        waited = 0.0
        while True:
            [described] = fsx.describe_data_repository_tasks(TaskIds=[task["TaskId"]])["DataRepositoryTasks"]
            lifecycle = described["Lifecycle"]
            if lifecycle == "SUCCEEDED":
                self.say(f"exported {file_system_id}")
                return
            if lifecycle in ("FAILED", "CANCELED") or waited >= EXPORT_TASK_SECONDS:
                reason = described.get("FailureDetails", {}).get("Message", lifecycle)
                raise TeardownError(
                    f"the export of {file_system_id} did not finish ({reason}): the file system and the "
                    "network stack are kept"
                )
            self.sleep(POLL_SECONDS)
            waited += POLL_SECONDS

    def _wait_file_system_gone(self, fsx: Any, file_system_id: str) -> None:
        while self._file_system(fsx, file_system_id):
            self.sleep(POLL_SECONDS)

    def _confirmed(self, item: Retained, yes: bool) -> bool:
        if yes:
            return True
        answer = self.confirm(f"delete {item} and all its data for good? type {item.physical_id} to go on: ")
        if answer.strip() != item.physical_id:
            self.say(f"kept {item}: not confirmed")
            return False
        return True

    def _report_and_delete(self, retained: list[Retained], delete: set[str], yes: bool) -> None:
        kept = []
        for item in retained:
            if item.physical_id in delete and self._confirmed(item, yes):
                self._delete_retained(item)
            elif item.resource_type != FILE_SYSTEM or self._file_system(self.client("fsx"), item.physical_id):
                kept.append(item)
        if not kept:
            self.say("nothing retained")
            return
        self.say("retained (delete one with --delete-retained ID; export a file system with --export ID):")
        costs = [self.monthly_cost(item) for item in kept]
        for item, (_, words) in zip(kept, costs, strict=True):
            self.say(f"  {item}: {words}")
        fixed = [usd for usd, _ in costs]
        total = f"${sum(fixed):,.2f}/month" if None not in fixed else "not known (an item is not priced)"
        self.say(f"the retained resources keep costing {total}, plus what they store")

    def monthly_cost(self, item: Retained) -> tuple[float | None, str]:
        """What a retained resource keeps costing, at the Region's prices (trainstack/infra_prices.py): its
        fixed monthly charge (0 where it bills only by what it stores; None: not priced) and in words."""
        prices = INFRA_PRICES.get(self.settings.region)
        if prices is None:
            return None, f"not priced ({self.settings.region} has no prices in trainstack)"
        if item.resource_type == FILE_SYSTEM:
            described = self._file_system(self.client("fsx"), item.physical_id) or {}
            lustre = described.get("LustreConfiguration", {})
            size = FileSystemSize(
                lustre.get("DeploymentType", ""),
                lustre.get("PerUnitStorageThroughput"),
                described.get("StorageCapacity", 0),
            )
            monthly = file_system_monthly_usd(size, prices)
            return monthly, f"${monthly:,.2f}/month" if monthly is not None else "not priced"
        if item.resource_type == "AWS::KMS::Key":
            return prices.kms_key_month, f"{rate(prices.kms_key_month)}/month until deleted"
        by_use = {
            "AWS::S3::Bucket": f"what it stores, {rate(prices.s3_standard_gb_month)}/GB-month (S3 Standard)",
            "AWS::S3Express::DirectoryBucket": "what it stores, at S3 Express One Zone's rate",
            "AWS::Logs::LogGroup": f"what it stores, {rate(prices.logs_storage_gb_month)}/GB-month",
            "AWS::ECR::Repository": f"its images, {rate(prices.ecr_storage_gb_month)}/GB-month",
            "AWS::DynamoDB::Table": f"what it stores, {rate(prices.dynamodb_storage_gb_month)}/GB-month",
            "AWS::SageMaker::ModelPackageGroup": "nothing (model packages are free; artifacts are in S3)",
            "AWS::StepFunctions::StateMachineVersion": "nothing",
            "AWS::StepFunctions::StateMachineAlias": "nothing",
        }
        if item.resource_type in by_use:
            return 0.0, by_use[item.resource_type]
        return None, "not priced"

    def _delete_retained(self, item: Retained) -> None:
        name, kind = item.physical_id, item.resource_type
        self.say(f"deleting {item}")
        if kind == "AWS::S3::Bucket":
            self._empty_versioned_bucket(name)
        elif kind == "AWS::S3Express::DirectoryBucket":
            self._empty_bucket(name)
        elif kind == "AWS::Logs::LogGroup":
            self.client("logs").delete_log_group(logGroupName=name)
        elif kind == "AWS::ECR::Repository":
            self.client("ecr").delete_repository(repositoryName=name, force=True)
        elif kind == "AWS::DynamoDB::Table":
            self.client("dynamodb").delete_table(TableName=name)
        elif kind == "AWS::KMS::Key":
            # KMS deletes a key only after a waiting period (7-30 days); what it encrypted is lost then.
            self.client("kms").schedule_key_deletion(KeyId=name, PendingWindowInDays=30)
        elif kind == "AWS::SageMaker::ModelPackageGroup":
            self._delete_model_package_group(name)
        elif kind == "AWS::StepFunctions::StateMachineVersion":
            self.client("stepfunctions").delete_state_machine_version(stateMachineVersionArn=name)
        elif kind == "AWS::StepFunctions::StateMachineAlias":
            self.client("stepfunctions").delete_state_machine_alias(stateMachineAliasArn=name)
        elif kind == FILE_SYSTEM:
            self.client("fsx").delete_file_system(FileSystemId=name)

    def _empty_versioned_bucket(self, bucket: str) -> None:
        s3 = self.client("s3")
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
            versions = [*page.get("Versions", []), *page.get("DeleteMarkers", [])]
            objects = [{"Key": v["Key"], "VersionId": v["VersionId"]} for v in versions]
            if objects:
                s3.delete_objects(Bucket=bucket, Delete={"Objects": objects, "Quiet": True})
        s3.delete_bucket(Bucket=bucket)

    def _empty_bucket(self, bucket: str) -> None:
        s3 = self.client("s3")
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            objects = [{"Key": entry["Key"]} for entry in page.get("Contents", [])]
            if objects:
                s3.delete_objects(Bucket=bucket, Delete={"Objects": objects, "Quiet": True})
        s3.delete_bucket(Bucket=bucket)

    def _delete_model_package_group(self, group: str) -> None:
        sagemaker = self.client("sagemaker")
        pages = sagemaker.get_paginator("list_model_packages").paginate(ModelPackageGroupName=group)
        for package in (summary for page in pages for summary in page["ModelPackageSummaryList"]):
            sagemaker.delete_model_package(ModelPackageName=package["ModelPackageArn"])
        sagemaker.delete_model_package_group(ModelPackageGroupName=group)


def main(argv: list[str] | None = None) -> int:
    import boto3

    from trainstack.config_loading import ConfigError, load_settings

    parser = argparse.ArgumentParser(prog="trainstack-teardown", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="config/default.yaml")
    parser.add_argument(
        "--delete-retained",
        action="append",
        default=[],
        metavar="ID",
        help="also delete this retained resource and its data (repeatable)",
    )
    parser.add_argument(
        "--export",
        action="append",
        default=[],
        metavar="FS_ID",
        help="export this retained file system to its linked S3 bucket first (repeatable)",
    )
    parser.add_argument("--yes", action="store_true", help="do not ask before each deletion")
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.config)
        Teardown(boto3.Session(), settings).run(
            delete=args.delete_retained, export=args.export, assume_yes=args.yes
        )
    except (ConfigError, TeardownError) as error:
        print(f"trainstack teardown: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
