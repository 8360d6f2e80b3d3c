"""Retrain on new data (config `retrain_on_new_data`): the EventBridge rule on the dataset bucket's
object-created events under the prefix, the trigger state machine it starts (debounce.py, then
triggered_run.py) and the DynamoDB table that keeps each profile's window, controller and last dataset
hash. docs/trigger.md describes the design, its cost and its assumptions."""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.checkov_skips import skip_checkov
from stacks.pipeline import manifest_listing
from stacks.pipeline.logged_state_machine import logged_state_machine
from stacks.pipeline.state_machine_facts import execution_timeout_seconds
from stacks.pipeline.trigger.debounce import Debounce
from stacks.pipeline.trigger.trigger_calls import TriggerTable
from stacks.pipeline.trigger.triggered_run import FsxTarget, TriggeredRun
from stacks.storage.storage_stack import StorageStack
from stacks.validation import acknowledge
from stacks.wildcard_acknowledgments import acknowledge_wildcard_statements
from trainstack.profiles import Profile
from trainstack.trigger_settings import (
    FSX_REPORTS_FOLDER,
    RetrainOnNewData,
    trigger_machine_name,
    trigger_table_name,
)

# S3's EventBridge event for a new or overwritten object (S3 user guide, "EventBridge event message
# structure"): detail.bucket.name, detail.object.key.
OBJECT_CREATED = "Object Created"
# Slack on top of the longest window, import and run, in the controller's lease.
LEASE_SLACK_SECONDS = 3600


class RetrainTrigger(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        project: str,
        trigger: RetrainOnNewData,
        storage: StorageStack,
        pipeline: sfn.StateMachine,
        profiles: Sequence[Profile],
    ) -> None:
        super().__init__(scope, construct_id)
        profile = next(profile for profile in profiles if profile.name == trigger.profile)
        dataset_bucket, dataset_prefix = storage.dataset_bucket, storage.dataset_prefix
        file_system_id = storage.file_system_id
        self.trigger = trigger
        self.table = trigger_state_table(self, project)
        name = trigger_machine_name(project)
        stack = cdk.Stack.of(self)
        self_arn = stack.format_arn(
            service="states",
            resource="stateMachine",
            resource_name=name,
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        lease_seconds = (
            round(trigger.max_delay_hours * 3600)
            + (trigger.fsx_import_timeout_minutes * 60 if file_system_id else 0)
            + execution_timeout_seconds([profile])
            + LEASE_SLACK_SECONDS
        )
        table = TriggerTable(
            self,
            table_name=trigger_table_name(project),
            table_arn=self.table.table_arn,
            profile=trigger.profile,
        )
        substitutions = {"DatasetBucket": dataset_bucket.bucket_name}
        fsx = None
        if file_system_id is not None:
            substitutions["FileSystemId"] = file_system_id
            fsx = _fsx_target(stack, file_system_id, trigger.prefix, dataset_prefix)
        run = TriggeredRun(
            self,
            project=project,
            trigger=trigger,
            table=table,
            dataset_bucket=dataset_bucket,
            dataset_bucket_name="${DatasetBucket}",
            pipeline=pipeline,
            fsx=fsx,
            self_arn=self_arn,
            lease_seconds=lease_seconds,
        )
        debounce = Debounce(
            self,
            table=table,
            trigger=trigger,
            lease_seconds=lease_seconds,
            closed=run.start,
            release=run.release,
        )
        # The lease is renewed before each child listing: a listing up to the bound may add its time.
        timeout = cdk.Duration.seconds(lease_seconds + manifest_listing.max_listing_seconds())
        self.state_machine, self.log_group = logged_state_machine(
            self, "StateMachine", name=name, chain=debounce.start, timeout=timeout
        )
        resource = self.state_machine.node.default_child
        assert isinstance(resource, sfn.CfnStateMachine)
        resource.definition_substitutions = substitutions
        self.rule = self._rule(dataset_bucket)
        self._acknowledge(self.state_machine.role, fsx=fsx is not None)

    @staticmethod
    def _acknowledge(role: iam.IRole, *, fsx: bool) -> None:
        reasons = {
            "states:DescribeExecution": "startExecution.sync:2 follows the pipeline execution it starts; "
            "its name is chosen per window at run time."
        }
        if fsx:
            reasons["fsx:CreateDataRepositoryTask"] = (
                "FSx chooses each data repository task's id; the statement also names the one file system."
            )
        acknowledge_wildcard_statements(role, reasons)
        acknowledge(
            role,
            "AwsSolutions-IAM5[Resource::*]",
            "CloudWatch Logs delivery and X-Ray actions (added by CDK for logging and tracing) and "
            "fsx:DescribeDataRepositoryTasks support no resource-level permissions.",
        )

    def _rule(self, bucket: s3.IBucket) -> events.Rule:
        rule = events.Rule(
            self,
            "OnNewData",
            description=f"New objects under s3://<datasets>/{self.trigger.prefix} start the retrain trigger",
            event_pattern=events.EventPattern(
                source=["aws.s3"],
                detail_type=[OBJECT_CREATED],
                detail={
                    "bucket": {"name": [bucket.bucket_name]},
                    "object": {"key": [{"prefix": self.trigger.prefix}]},
                },
            ),
        )
        # EventBridge retries a refused StartExecution (throttling) with backoff for up to 24 hours.
        rule.add_target(
            targets.SfnStateMachine(
                self.state_machine, max_event_age=cdk.Duration.hours(24), retry_attempts=185
            )
        )
        return rule

    def dashboard_widgets(self) -> list[cloudwatch.IWidget]:
        """Triggered runs: trigger executions by outcome (each event is one; a window's controller runs)."""
        machine = self.state_machine
        return [
            cloudwatch.GraphWidget(
                title=f"Retrain on new data ({self.trigger.profile}): trigger executions",
                left=[
                    machine.metric_started(label="events and hand-overs", statistic="Sum"),
                    machine.metric_succeeded(
                        label="succeeded (recorded, trained or unchanged)", statistic="Sum"
                    ),
                    machine.metric_failed(label="failed (listing, import or run)", statistic="Sum"),
                    machine.metric_timed_out(label="timed out", statistic="Sum"),
                ],
                width=12,
            )
        ]


# The trigger's construct id in the pipeline stack: its state table's logical id derives from it, and a
# retained table of a fixed name keeps its logical id for ever (migrations.keep_trigger_table).
TRIGGER_ID = "RetrainTrigger"


def trigger_state_table(scope: Construct, project: str) -> dynamodb.Table:
    """The trigger's state (`<project>-retrain-triggers`: the last dataset hash trained on per profile, the
    window's lease), retained: it outlives a redeploy, and stays while the trigger is off with
    migrations.keep_trigger_table, so that turning it on again finds it."""
    table = dynamodb.Table(
        scope,
        "State",
        table_name=trigger_table_name(project),
        partition_key=dynamodb.Attribute(name="profile", type=dynamodb.AttributeType.STRING),
        billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
        # KMS with DynamoDB's AWS managed key (CT.DYNAMODB.PR.2); no key of ours to pay for or grant.
        encryption=dynamodb.TableEncryption.AWS_MANAGED,
        point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
            point_in_time_recovery_enabled=True
        ),
        removal_policy=cdk.RemovalPolicy.RETAIN,  # the last dataset hash outlives a redeploy
    )
    skip_checkov(
        table,
        {"CKV_AWS_119": "Times, a key name and hashes: the AWS managed KMS key (aws/dynamodb) suffices."},
    )
    return table


def _fsx_target(stack: cdk.Stack, file_system_id: str, prefix: str, dataset_prefix: str) -> FsxTarget:
    """The import task's file system (a placeholder the substitutions fill) and S3 paths."""
    return FsxTarget(
        file_system_id="${FileSystemId}",
        file_system_arn=stack.format_arn(service="fsx", resource="file-system", resource_name=file_system_id),
        import_path=f"s3://${{DatasetBucket}}/{prefix}",
        report_path=f"s3://${{DatasetBucket}}/{dataset_prefix}{FSX_REPORTS_FOLDER}".rstrip("/"),
    )
