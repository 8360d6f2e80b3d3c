"""Training pipeline: SageMaker execution role, the Step Functions state machine, job cleanup,
notifications and per-profile schedules. docs/pipeline.md describes the behaviour."""

from __future__ import annotations

import json
from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_scheduler as scheduler
from constructs import Construct

from stacks.image.image_stack import ImageStack
from stacks.network.network_stack import NetworkStack
from stacks.pipeline.cleanup.job_cleanup import JobCleanup
from stacks.pipeline.cleanup.queue_cleanup import QueueCleanup
from stacks.pipeline.mlflow_access import grant_mlflow_tracking
from stacks.pipeline.monitoring import TRAINING_METRICS_NAMESPACE, PipelineMonitoring
from stacks.pipeline.pipeline_notifications import PipelineNotifications
from stacks.pipeline.pipeline_resources import pipeline_resources, team_dataset
from stacks.pipeline.queue.training_queue import TrainingQueue, training_queue
from stacks.pipeline.run_reader import team_run_reader
from stacks.pipeline.team_access import TeamAccess
from stacks.pipeline.training_state_machine import TrainingStateMachine
from stacks.pipeline.trigger.retrain_trigger import TRIGGER_ID, RetrainTrigger, trigger_state_table
from stacks.run_data_key import encrypt_log_groups, grant_training_jobs
from stacks.storage.storage_stack import StorageStack
from stacks.validation import acknowledge
from stacks.wildcard_acknowledgments import acknowledge_wildcard_statements
from trainstack.pipeline_runs import PipelineRuns
from trainstack.profiles import Profile
from trainstack.queue_settings import BATCH_TRAINING_JOB_PREFIX, queue_job_prefix
from trainstack.teams import Team
from trainstack.trigger_settings import RetrainOnNewData

# Where SageMaker training jobs write their logs (fixed by SageMaker).
TRAINING_LOG_GROUP = "/aws/sagemaker/TrainingJobs"
# Key of the CfnOutput the CLI reads (trainstack start/status).
STATE_MACHINE_ARN_OUTPUT = "StateMachineArn"
CLEANUP_STATE_MACHINE_ARN_OUTPUT = "CleanupStateMachineArn"
NOTIFICATION_TOPIC_ARN_OUTPUT = "NotificationTopicArn"


class PipelineStack(cdk.Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        runs: PipelineRuns,
        notification_emails: Sequence[str],
        network: NetworkStack,
        storage: StorageStack,
        image: ImageStack,
        trigger: RetrainOnNewData | None = None,
        team: Team | None = None,
        queue: TrainingQueue | None = None,
        guarded_tag_keys: Sequence[str] = (),
        **kwargs,
    ) -> None:
        """One pipeline: the project's, or with teams one team's (`team`; `runs` namespaced
        `<project>-<team>`), whose runs read only the team's dataset directory and go through the teams'
        shared `queue`."""
        super().__init__(
            scope,
            construct_id,
            description="trainstack pipeline: training state machine, SageMaker role, cleanup, "
            "notifications, dashboard and alarms",
            **kwargs,
        )
        project = runs.project
        self.dataset = team_dataset(storage, team)
        if queue is None and team is None:
            queue = training_queue(
                self, project=project, queue=runs.queue, keep_run_names_table=runs.keep_run_names_table
            )
        self.queue = queue
        self.sagemaker_role = self._sagemaker_role(project, network, storage, image)
        _grant_inherited_runs(self.sagemaker_role, storage, runs)
        grant_mlflow_tracking(self.sagemaker_role, runs.profiles)
        if storage.run_data_key is not None:
            grant_training_jobs(self.sagemaker_role, storage.run_data_key, runs.profiles)
        self.resources = pipeline_resources(
            project, self.sagemaker_role, network, storage, image, self.dataset
        )
        self.training = TrainingStateMachine(
            self,
            "Training",
            runs=runs,
            resources=self.resources,
            sagemaker_role=self.sagemaker_role,
            image_repository_arn=image.repository.repository_arn,
            queue=self.queue,
        )
        self.state_machine = self.training.state_machine
        self._cleanup_and_monitoring(project, notification_emails)
        self.training.registration.add_to_dashboard(self.monitoring.dashboard)
        self._schedules(project, runs.profiles)
        if team is not None:
            self.team_access = TeamAccess(
                self,
                "TeamAccess",
                team=team,
                project=project,
                pipeline=self.state_machine,
                run_reader=team_run_reader(self, project, team, self.sagemaker_role, self.queue),
                guarded_tag_keys=guarded_tag_keys,
            )
        if storage.run_data_key is not None:
            encrypt_log_groups(self, storage.run_data_key)
        if trigger is None and runs.keep_trigger_table:
            trigger_state_table(Construct(self, TRIGGER_ID), project)
        if trigger is not None:
            self.trigger = RetrainTrigger(
                self,
                TRIGGER_ID,
                project=project,
                trigger=trigger,
                storage=storage,
                pipeline=self.state_machine,
                profiles=runs.profiles,
            )
            self.monitoring.dashboard.add_widgets(*self.trigger.dashboard_widgets())
        self._outputs()

    def _cleanup_and_monitoring(self, project: str, notification_emails: Sequence[str]) -> None:
        """No orphaned jobs (the job cleanup, and the queue's), the SNS topic, the dashboard and alarms."""
        self.cleanup = JobCleanup(
            self,
            "JobCleanup",
            project=project,
            pipeline=self.state_machine,
            batch_queue_name=self.queue.queue_name if self.queue is not None else None,
        )
        if self.queue is not None:
            self.queue_cleanup = QueueCleanup(
                self, "QueueCleanup", project=project, pipeline=self.state_machine, queue=self.queue
            )
        self.notifications = PipelineNotifications(
            self,
            "Notifications",
            project=project,
            pipeline=self.state_machine,
            emails=notification_emails,
        )
        self.training.registration.notify(self.notifications.topic)
        cleanups = [self.cleanup] + ([self.queue_cleanup] if self.queue is not None else [])
        self.monitoring = PipelineMonitoring(
            self,
            "Monitoring",
            project=project,
            pipeline=self.state_machine,
            pipeline_log_group=self.training.log_group,
            cleanup_machines=[
                machine for cleanup in cleanups for machine in (cleanup.state_machine, cleanup.sweeper)
            ],
            sweepers=[cleanup.sweeper for cleanup in cleanups],
            topic=self.notifications.topic,
        )

    def _outputs(self) -> None:
        """What the CLI reads (trainstack start/status) and a person needs to start or follow a run."""
        cdk.CfnOutput(
            self,
            STATE_MACHINE_ARN_OUTPUT,
            value=self.state_machine.state_machine_arn,
            description="Start a retraining: aws stepfunctions start-execution --state-machine-arn <this>",
        )
        cdk.CfnOutput(
            self,
            CLEANUP_STATE_MACHINE_ARN_OUTPUT,
            value=self.cleanup.state_machine.state_machine_arn,
            description="Stops the training jobs of pipeline executions that failed, timed out, were aborted",
        )
        cdk.CfnOutput(
            self,
            NOTIFICATION_TOPIC_ARN_OUTPUT,
            value=self.notifications.topic.topic_arn,
            description="SNS topic told about every finished pipeline execution",
        )

    def _sagemaker_role(
        self, project: str, network: NetworkStack, storage: StorageStack, image: ImageStack
    ) -> iam.Role:
        """What a training job may do: read the dataset, read/write checkpoints and artifacts, pull the
        image, write its logs and metrics, and manage the ENIs of its VPC placement."""
        role = iam.Role(
            self,
            "SageMakerExecutionRole",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description=f"{project} training jobs: their buckets, image, logs and VPC network interfaces",
        )
        _grant_data(role, project, storage, self.dataset.prefix)
        if image.repository is not None:
            image.repository.grant_pull(role)
        else:
            role.add_to_policy(iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]))
        self._log_and_metric_permissions(role, project)
        self._vpc_permissions(role, network)
        _acknowledge_role(role, project)
        return role

    def _log_and_metric_permissions(self, role: iam.Role, project: str) -> None:
        """The job's log streams in SageMaker's fixed group, and its metrics in their namespace."""
        log_group_arn = self.format_arn(
            service="logs",
            resource="log-group",
            resource_name=TRAINING_LOG_GROUP,
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="TrainingLogs",
                actions=["logs:CreateLogGroup", "logs:DescribeLogStreams"],
                resources=[log_group_arn, f"{log_group_arn}:*"],
            )
        )
        job_name_prefixes = [f"{project}-"]
        if self.queue is not None:
            job_name_prefixes.append(BATCH_TRAINING_JOB_PREFIX + queue_job_prefix(self.queue.queue_name))
        role.add_to_policy(
            iam.PolicyStatement(
                sid="TrainingLogStreams",
                actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                # Streams are named <job name>/algo-<n>-<id>; in queue mode Batch names the jobs
                # AWSBatch<jobName>..., our jobNames starting with the queue's key (trainstack.queue_settings)
                # (log streams carry no tags, so only the name narrows them; only this role's jobs write).
                resources=[f"{log_group_arn}:log-stream:{prefix}*" for prefix in job_name_prefixes],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="TrainingMetrics",
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": TRAINING_METRICS_NAMESPACE}},
            )
        )

    def _vpc_permissions(self, role: iam.Role, network: NetworkStack) -> None:
        """ENI actions SageMaker performs for jobs with VpcConfig, scoped to the training VPC."""
        vpc_arn = self.format_arn(service="ec2", resource="vpc", resource_name=network.vpc.vpc_id)
        any_interface = self.format_arn(service="ec2", resource="network-interface", resource_name="*")
        role.add_to_policy(
            iam.PolicyStatement(
                sid="DescribeNetwork",
                actions=[
                    "ec2:DescribeNetworkInterfaces",
                    "ec2:DescribeVpcs",
                    "ec2:DescribeDhcpOptions",
                    "ec2:DescribeSubnets",
                    "ec2:DescribeSecurityGroups",
                ],
                resources=["*"],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="CreateInterfacesInTrainingSubnets",
                actions=["ec2:CreateNetworkInterface"],
                resources=[
                    *(
                        self.format_arn(service="ec2", resource="subnet", resource_name=subnet.subnet_id)
                        for subnet in network.training_subnets
                    ),
                    self.format_arn(
                        service="ec2",
                        resource="security-group",
                        resource_name=network.training_security_group.security_group_id,
                    ),
                ],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="ManageInterfacesInTrainingVpc",
                actions=[
                    "ec2:CreateNetworkInterface",
                    "ec2:CreateNetworkInterfacePermission",
                    "ec2:DeleteNetworkInterface",
                    "ec2:DeleteNetworkInterfacePermission",
                ],
                resources=[any_interface],
                conditions={"ArnEquals": {"ec2:Vpc": vpc_arn}},
            )
        )

    def _schedules(self, project: str, profiles: Sequence[Profile]) -> None:
        """An EventBridge Scheduler schedule per profile that sets `schedule`: {"profile": <name>}."""
        scheduled = [profile for profile in profiles if profile.schedule]
        if not scheduled:
            return
        role = iam.Role(
            self,
            "SchedulerRole",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": self.account}}
            ),
            description=f"{project} schedules: start pipeline executions",
        )
        self.state_machine.grant_start_execution(role)
        for profile in scheduled:
            scheduler.CfnSchedule(
                self,
                f"Schedule-{profile.name}",
                name=f"{project}-{profile.name}",
                description=f"Periodic retraining with profile {profile.name}",
                schedule_expression=profile.schedule,
                schedule_expression_timezone="UTC",
                flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
                target=scheduler.CfnSchedule.TargetProperty(
                    arn=self.state_machine.state_machine_arn,
                    role_arn=role.role_arn,
                    input=json.dumps({"profile": profile.name}),
                    retry_policy=scheduler.CfnSchedule.RetryPolicyProperty(maximum_retry_attempts=3),
                ),
            )


def _grant_inherited_runs(role: iam.Role, storage: StorageStack, runs: PipelineRuns) -> None:
    """teams[].inherits_single_team_runs: read the pre-teams runs (`<project>-*`: resumeFrom, init_from),
    never the other teams' runs within that prefix (an explicit deny wins over any allow)."""
    if not runs.inherited:
        return
    buckets = (storage.checkpoint_bucket, storage.artifact_bucket)
    for sid, effect, prefixes in (
        ("InheritedRuns", iam.Effect.ALLOW, runs.inherited_prefixes),
        ("OtherTeamsRuns", iam.Effect.DENY, runs.foreign_prefixes),
    ):
        if not prefixes:
            continue  # the only team: no other team's runs to deny
        role.add_to_policy(
            iam.PolicyStatement(
                sid=f"List{sid}",
                effect=effect,
                actions=["s3:ListBucket"],
                resources=[bucket.bucket_arn for bucket in buckets],
                conditions={"StringLike": {"s3:prefix": [f"{prefix}*" for prefix in prefixes]}},
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid=f"Read{sid}",
                effect=effect,
                actions=["s3:GetObject"],
                resources=[bucket.arn_for_objects(f"{prefix}*") for bucket in buckets for prefix in prefixes],
            )
        )
    acknowledge_wildcard_statements(
        role,
        {
            "ReadInheritedRuns": f"Pre-teams runs are named {runs.inherited}-<run>, chosen per execution; "
            "the other teams' runs within that prefix are denied."
        },
    )


def _grant_data(role: iam.Role, project: str, storage: StorageStack, dataset_prefix: str) -> None:
    """Read the dataset under `dataset_prefix`; read and write the runs' checkpoints and artifacts (and their
    keys): with teams, the team's own prefixes only."""
    dataset = storage.dataset_bucket
    role.add_to_policy(
        iam.PolicyStatement(
            sid="ListDataset",
            actions=["s3:ListBucket"],
            resources=[dataset.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [f"{dataset_prefix}*"]}},
        )
    )
    role.add_to_policy(
        iam.PolicyStatement(
            sid="ReadDataset",
            actions=["s3:GetObject"],
            resources=[dataset.arn_for_objects(f"{dataset_prefix}*")],
        )
    )
    # Checkpoints sync both ways (resume, save); resumeFrom may point at checkpoints or artifacts.
    run_buckets = (storage.checkpoint_bucket, storage.artifact_bucket)
    role.add_to_policy(
        iam.PolicyStatement(
            sid="ListRunBuckets",
            actions=["s3:ListBucket"],
            resources=[bucket.bucket_arn for bucket in run_buckets],
            conditions={"StringLike": {"s3:prefix": [f"{project}-*"]}},
        )
    )
    role.add_to_policy(
        iam.PolicyStatement(
            sid="ReadWriteRuns",
            actions=["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
            resources=[bucket.arn_for_objects(f"{project}-*") for bucket in run_buckets],
        )
    )
    if (express := storage.express_checkpoints.bucket_arn(project)) is not None:
        # s3-express: a session on the team's own directory bucket authorizes every object call in it
        # (s3torchconnector's CRT client creates ReadWrite sessions); CreateSession has no narrower resource.
        role.add_to_policy(
            iam.PolicyStatement(
                sid="ExpressCheckpoints", actions=["s3express:CreateSession"], resources=[express]
            )
        )
    if storage.encryption_key is not None:
        # SSE-KMS reads and writes (multipart uploads decrypt too): no wildcard actions.
        storage.encryption_key.grant(role, "kms:Decrypt", "kms:GenerateDataKey")
    if storage.dataset_key is not None:
        storage.dataset_key.grant_decrypt(role)  # an existing SSE-KMS dataset bucket


def _acknowledge_role(role: iam.Role, project: str) -> None:
    acknowledge(
        role,
        "AwsSolutions-IAM5[Resource::*]",
        "ecr:GetAuthorizationToken, cloudwatch:PutMetricData (limited by the namespace condition) and "
        "the EC2 Describe* calls SageMaker makes for VPC placement support no resource-level "
        "permissions.",
    )
    acknowledge_wildcard_statements(
        role,
        {
            "ReadDataset": "Training reads every object under the configured dataset prefix.",
            "ReadWriteRuns": f"Runs own s3://<bucket>/<runName>/ and run names start with {project}-; "
            "the run names are chosen per execution.",
            "TrainingLogs": f"SageMaker writes job logs as streams of its fixed group {TRAINING_LOG_GROUP}.",
            "TrainingLogStreams": f"Streams are named after the job; job names start with {project}-.",
            "ManageInterfacesInTrainingVpc": "SageMaker creates the job's network interfaces at run "
            "time; "
            "the ec2:Vpc condition limits them to the training VPC.",
        },
    )
