"""Queue mode: an AWS Batch service environment and job queue for SageMaker Training (docs/queue.md).

Batch holds submitted training jobs RUNNABLE while `max_instances` instances are in use, orders them
(first in, first out, or by fair share and priority when shares are configured), and re-submits a
training job that failed for lack of capacity until it starts or has waited `capacity_wait_hours`.
CDK's Batch L2 has no service environment and its JobQueue no SAGEMAKER_TRAINING type, so those two
are L1; the fair-share policy is the L2 FairshareSchedulingPolicy.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_batch as batch
from aws_cdk import aws_iam as iam
from constructs import Construct

from stacks.validation import acknowledge
from trainstack.job_request import RUN_TAG
from trainstack.queue_settings import QueueSettings, training_queue_name

SERVICE_TYPE = "SAGEMAKER_TRAINING"
# statusReason Batch gives a job waiting after capacity errors (Batch user guide, "Jobs stuck in RUNNABLE").
CAPACITY_REASON = "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"
# A job larger than the service environment; the pipeline rejects those up front, this is the backstop.
MAX_RESOURCE_REASON = "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE"
MIN_TIME_LIMIT_SECONDS = 600
SERVICE_JOB_ACTIONS = ("batch:DescribeServiceJob", "batch:TerminateServiceJob")
# Batch creates a service job's training job under its own name: the service-linked role's managed policy
# AWSBatchServiceRolePolicyForSageMaker allows Create/Describe/StopTrainingJob only on
# `training-job/AWSBatch*`, and Batch's guide shows ARNs `training-job/AWSBatch<jobName><attemptId>`.
BATCH_TRAINING_JOB_PREFIX = "AWSBatch"


def batch_training_job_arns(scope: Construct) -> str:
    return cdk.Stack.of(scope).format_arn(
        service="sagemaker", resource="training-job", resource_name=f"{BATCH_TRAINING_JOB_PREFIX}*"
    )


def batch_training_jobs(scope: Construct, project: str, sid: str, actions: list[str]) -> iam.PolicyStatement:
    """`actions` on the training jobs Batch starts, narrowed to this project's runs by their run tag (run
    names start with `<project>-`): the training-job resource type supports `aws:ResourceTag/${TagKey}`
    (Service Authorization Reference, Amazon SageMaker, resource types), and the job carries the
    request's Tags from creation."""
    return iam.PolicyStatement(
        sid=sid,
        actions=actions,
        resources=[batch_training_job_arns(scope)],
        conditions={"StringLike": {f"aws:ResourceTag/{RUN_TAG}": f"{project}-*"}},
    )


def weight_factor(weight: int) -> float:
    """Batch's weightFactor gives a share MORE capacity the LOWER it is; config weights say "more is more"."""
    return round(1 / weight, 4)


class TrainingQueue(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, project: str, queue: QueueSettings) -> None:
        super().__init__(scope, construct_id)
        self.project = project
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

    @property
    def service_job_arn(self) -> str:
        """Every service job of this account and region: Batch chooses their ids at submit time."""
        return cdk.Stack.of(self).format_arn(service="batch", resource="service-job", resource_name="*")

    def grant_submit(self, role: iam.Role) -> None:
        """Submit (and tag) service jobs to this queue. Describe/TerminateServiceJob act on service-job ARNs;
        the tasks that call them add those statements, acknowledged here."""
        role.add_to_policy(
            iam.PolicyStatement(
                sid="SubmitToTrainingQueue",
                actions=["batch:SubmitServiceJob"],
                resources=[self.job_queue_arn],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="TagNewServiceJobs", actions=["batch:TagResource"], resources=[self.service_job_arn]
            )
        )
        acknowledge(
            role,
            f"AwsSolutions-IAM5[Resource::{self.service_job_arn}]",
            "Batch chooses service job ids at submit time; jobs can only be submitted to this project's "
            "queue.",
        )


def _terminate_after(reason: str, seconds: int) -> batch.CfnJobQueue.JobStateTimeLimitActionProperty:
    return batch.CfnJobQueue.JobStateTimeLimitActionProperty(
        action="TERMINATE", max_time_seconds=seconds, reason=reason, state="RUNNABLE"
    )
