"""Operations: an encrypted SNS topic told about every finished execution; the alarms (monitoring.py)
also tell it."""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
import jsii
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.pipeline.machine_kit import execution_status_pattern

FINISHED = ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED")


@jsii.implements(events.IRuleTarget)
class PublishFromRule:
    """An EventBridge rule's target: `message` published to `topic`, which lets events.amazonaws.com publish
    only for the rules bound to it (aws:SourceArn: EventBridge User Guide, "Using resource-based policies
    for Amazon EventBridge", Amazon SNS permissions). targets.SnsTopic lets any rule of the account publish,
    so any rule could send a team's notifications."""

    def __init__(self, topic: sns.ITopic, message: events.RuleTargetInput) -> None:
        self.topic, self.message = topic, message

    def bind(self, rule: events.IRule, _id: str | None = None) -> events.RuleTargetConfig:
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                actions=["sns:Publish"],
                principals=[iam.ServicePrincipal("events.amazonaws.com")],
                resources=[self.topic.topic_arn],
                conditions={"ArnEquals": {"aws:SourceArn": rule.rule_arn}},
            )
        )
        return events.RuleTargetConfig(arn=self.topic.topic_arn, input=self.message)


class PipelineNotifications(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        project: str,
        pipeline: sfn.StateMachine,
        emails: Sequence[str],
    ) -> None:
        super().__init__(scope, construct_id)
        self.key = kms.Key(
            self,
            "TopicKey",
            description=f"{project} pipeline notifications topic",
            enable_key_rotation=True,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        # EventBridge and CloudWatch alarms publish to the encrypted topic: they need the key.
        for service in ("events.amazonaws.com", "cloudwatch.amazonaws.com"):
            self.key.grant(iam.ServicePrincipal(service), "kms:Decrypt", "kms:GenerateDataKey*")
        self.topic = sns.Topic(
            self,
            "Topic",
            display_name=f"{project} training pipeline",
            master_key=self.key,
            enforce_ssl=True,
        )
        for email in emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
        detail = events.EventField.from_path
        self.rule = events.Rule(
            self,
            "OnExecutionFinished",
            description=f"Notify about every finished {project} pipeline execution",
            event_pattern=execution_status_pattern(pipeline, FINISHED),
        )
        self.rule.add_target(
            PublishFromRule(
                self.topic,
                events.RuleTargetInput.from_text(
                    f"{project} training pipeline execution {detail('$.detail.name')} "
                    f"{detail('$.detail.status')}. Error: {detail('$.detail.error')}. "
                    f"Cause: {detail('$.detail.cause')}. Output: {detail('$.detail.output')}. "
                    f"Execution: {detail('$.detail.executionArn')}"
                ),
            )
        )
