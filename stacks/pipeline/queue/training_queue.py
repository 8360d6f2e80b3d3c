"""Queue mode: an AWS Batch service environment and job queue for SageMaker Training (docs/queue.md).

Batch holds submitted training jobs RUNNABLE while `max_instances` instances are in use, orders them
(first in, first out, or by fair share and priority when shares are configured), and re-submits a
training job that failed for lack of capacity until it starts or has waited `capacity_wait_hours`.
CDK's Batch L2 has no service environment and its JobQueue no SAGEMAKER_TRAINING type, so those two
are L1; the fair-share policy is the L2 FairshareSchedulingPolicy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_batch as batch
from aws_cdk import aws_iam as iam
from constructs import Construct

from stacks.pipeline.queue.run_names import run_names_table
from stacks.validation import acknowledge
from trainstack.queue_settings import (
    BATCH_TRAINING_JOB_PREFIX,
    RUN_KEY_LENGTH,
    QueueSettings,
    queue_job_prefix,
    training_queue_name,
)

SERVICE_TYPE = "SAGEMAKER_TRAINING"
# Key of the CfnOutput naming the job queue (the pipeline stack's, or with teams the queue stack's).
TRAINING_QUEUE_ARN_OUTPUT = "TrainingQueueArn"
# statusReason Batch gives a job waiting after capacity errors (Batch user guide, "Jobs stuck in RUNNABLE").
CAPACITY_REASON = "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"
# A job larger than the service environment; the pipeline rejects those up front, this is the backstop.
MAX_RESOURCE_REASON = "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE"
MIN_TIME_LIMIT_SECONDS = 600


def batch_training_job_arns(scope: Construct, queue_name: str) -> list[str]:
    """The training jobs Batch starts for the service jobs of the queue `queue_name`:
    `AWSBatch<jobName><attemptId>` (queue_settings.py), and every jobName we submit starts with the queue's
    key (with teams, every team's: the queue is shared). In both casings: SageMaker
    reports its ARNs lower-cased (boto/boto3#4606) and no source says which one IAM authorizes."""
    prefix = BATCH_TRAINING_JOB_PREFIX + queue_job_prefix(queue_name)
    return [
        cdk.Stack.of(scope).format_arn(service="sagemaker", resource="training-job", resource_name=f"{name}*")
        for name in (prefix, prefix.lower())
    ]


def batch_training_jobs(
    scope: Construct, queue_name: str, sid: str, actions: list[str]
) -> iam.PolicyStatement:
    """`actions` on the training jobs Batch starts for the queue's service jobs, by the name we give their
    service
    jobs. No tag condition: no source says the training job carries the payload's Tags (AWS's SDK sends
    a run's tags as the service job's own `tags`: sagemaker-python-sdk, aws_batch/batch_api_helper.py)."""
    return iam.PolicyStatement(sid=sid, actions=actions, resources=batch_training_job_arns(scope, queue_name))


def service_job_name(queue_name: str, run_name: str, attempt: str) -> str:
    """JSONata for queue_settings.service_job_name of a run (`run_name`) and attempt (`attempt`, digits),
    both JSONata strings: Step Functions' $hash gives SHA-256 in lower-case hex, as hashlib does."""
    return f"{run_job_prefix_of(queue_name, run_name)} & {attempt}"


def run_job_prefix_of(queue_name: str, run_name: str) -> str:
    """JSONata for trainstack.queue_settings.run_job_prefix: `<queue key><run key>-`."""
    return (
        f'"{queue_job_prefix(queue_name)}" & $substring($hash({run_name}, "SHA-256"), 0, {RUN_KEY_LENGTH})'
        ' & "-"'
    )


def weight_factor(weight: int) -> float:
    """Batch's weightFactor gives a share MORE capacity the LOWER it is; config weights say "more is more"."""
    return round(1 / weight, 4)


# The queue's construct id in the stack that holds it: the run-names table's logical id derives from it,
# and a retained table of a fixed name must keep its logical id for ever (migrations.keep_run_names_table).
QUEUE_ID = "Queue"


def training_queue(
    scope: Construct,
    *,
    project: str,
    queue: QueueSettings,
    keep_run_names_table: bool,
    existing_run_names: str | None = None,
) -> TrainingQueue | None:
    """Queue mode's queue in `scope`; with queue mode off nothing, or with `keep_run_names_table` its
    run-names table alone, at the same place, so that queue mode turned on again finds it and its claims."""
    if queue.enabled:
        return TrainingQueue(
            scope, QUEUE_ID, project=project, queue=queue, existing_run_names=existing_run_names
        )
    if keep_run_names_table and existing_run_names is None:
        run_names_table(Construct(scope, QUEUE_ID), project)
    return None


class TrainingQueue(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        project: str,
        queue: QueueSettings,
        existing_run_names: str | None = None,
    ) -> None:
        """existing_run_names: a run-names table another stack holds, claimed in instead of a table of
        this queue's own (run_names.run_names_table)."""
        super().__init__(scope, construct_id)
        self.project = project
        self.queue_name = training_queue_name(project)
        self.environment = batch.CfnServiceEnvironment(
            self,
            "ServiceEnvironment",
            service_environment_name=training_queue_name(project),
            service_environment_type=SERVICE_TYPE,
            capacity_limits=[
                batch.CfnServiceEnvironment.CapacityLimitProperty(
                    capacity_unit="NUM_INSTANCES", max_capacity=queue.max_instances
                )
            ],
            state="ENABLED",
        )
        self.scheduling_policy = (
            batch.FairshareSchedulingPolicy(
                self,
                "FairShare",
                scheduling_policy_name=training_queue_name(project),
                shares=[
                    batch.Share(share_identifier=name, weight_factor=weight_factor(weight))
                    for name, weight in queue.shares.items()
                ],
            )
            if queue.shares
            else None
        )
        self.job_queue = batch.CfnJobQueue(
            self,
            "JobQueue",
            job_queue_name=training_queue_name(project),
            job_queue_type=SERVICE_TYPE,
            priority=1,
            state="ENABLED",
            service_environment_order=[
                batch.CfnJobQueue.ServiceEnvironmentOrderProperty(
                    order=1, service_environment=self.environment.attr_service_environment_arn
                )
            ],
            scheduling_policy_arn=(
                self.scheduling_policy.scheduling_policy_arn if self.scheduling_policy else None
            ),
            job_state_time_limit_actions=[
                _terminate_after(CAPACITY_REASON, queue.capacity_wait_seconds),
                _terminate_after(MAX_RESOURCE_REASON, MIN_TIME_LIMIT_SECONDS),
            ],
        )
        self.job_queue_arn = self.job_queue.attr_job_queue_arn
        # What the CLI and a person read: the stack holding the queue (the pipeline's, or with teams the
        # queue stack) names it.
        cdk.CfnOutput(
            cdk.Stack.of(self),
            TRAINING_QUEUE_ARN_OUTPUT,
            value=self.job_queue_arn,
            description="AWS Batch job queue that holds training jobs until instances are free",
        )
        # Run names the queued attempts claimed: unique, as without the queue (run_names.py).
        self.run_names = run_names_table(self, project, existing_run_names)

    @property
    def service_job_arn(self) -> str:
        """Every service job of this account and region: Batch chooses their ids at submit time."""
        return cdk.Stack.of(self).format_arn(service="batch", resource="service-job", resource_name="*")

    def grant_submit(self, role: iam.Role, shares: Sequence[str], max_priority: int) -> None:
        """Submit (and tag) service jobs to this queue: SubmitServiceJob authorizes the job queue and the new
        service job, both required resource types (Service Authorization Reference, AWS Batch). `shares` and
        `max_priority`: what the submitting pipeline may name (with teams, the team's own share and cap)."""
        acknowledge(
            role,
            f"AwsSolutions-IAM5[Resource::{self.service_job_arn}]",
            "Batch chooses service job ids at submit time; jobs can only be submitted to this project's "
            "queue.",
        )
        iam.Grant.add_to_principal(
            grantee=role, actions=["batch:TagResource"], resource_arns=[self.service_job_arn]
        )
        # batch:SchedulingPriority belongs to the action (every resource it authorizes), batch:ShareIdentifier
        # to the service-job resource type (Service Authorization Reference, AWS Batch): a queue without
        # shares takes neither (the pipeline sends neither), a fair-share queue the pipeline's shares only
        # and a priority up to its bound, the input rule's.
        priority: dict[str, Any] = (
            {"NumericLessThanEqualsIfExists": {"batch:SchedulingPriority": str(max_priority)}}
            if shares
            else {"Null": {"batch:SchedulingPriority": "true"}}
        )
        share: dict[str, Any] = (
            {
                **priority,
                "StringEquals": {"batch:ShareIdentifier": list(shares)},
                "Null": {"batch:ShareIdentifier": "false"},
            }
            if shares
            else {"Null": {"batch:SchedulingPriority": "true", "batch:ShareIdentifier": "true"}}
        )
        for resource, conditions in ((self.job_queue_arn, priority), (self.service_job_arn, share)):
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["batch:SubmitServiceJob"], resources=[resource], conditions=conditions
                )
            )


def _terminate_after(reason: str, seconds: int) -> batch.CfnJobQueue.JobStateTimeLimitActionProperty:
    return batch.CfnJobQueue.JobStateTimeLimitActionProperty(
        action="TERMINATE", max_time_seconds=seconds, reason=reason, state="RUNNABLE"
    )
