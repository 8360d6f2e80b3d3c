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
from stacks.pipeline.code_access import publish_team_code
from stacks.pipeline.mlflow_access import TeamTrackingServer, grant_mlflow_tracking, tracking_servers
from stacks.pipeline.monitoring import PipelineMonitoring
from stacks.pipeline.pipeline_notifications import PipelineNotifications
from stacks.pipeline.pipeline_resources import pipeline_resources, team_dataset
from stacks.pipeline.queue.training_queue import TrainingQueue, training_queue
from stacks.pipeline.run_reader import team_run_reader
from stacks.pipeline.sagemaker_role import grant_inherited_runs, training_job_role
from stacks.pipeline.team_access import TeamAccess
from stacks.pipeline.training_state_machine import TrainingStateMachine
from stacks.pipeline.trigger.retrain_trigger import TRIGGER_ID, RetrainTrigger, trigger_state_table
from stacks.run_data_key import encrypt_log_groups, grant_training_jobs
from stacks.storage.storage_stack import StorageStack
from trainstack.pipeline_runs import PipelineRuns
from trainstack.profiles import Profile
from trainstack.teams import Team
from trainstack.trigger_settings import RetrainOnNewData

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
        self.sagemaker_role = training_job_role(
            self,
            project,
            network=network,
            storage=storage,
            image=image,
            dataset_prefix=self.dataset.prefix,
            queue=self.queue,
        )
        grant_inherited_runs(self.sagemaker_role, storage, runs)
        self._tracking(runs, storage)
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
                tracking_servers=tracking_servers(runs.profiles),
            )
        if storage.run_data_key is not None:
            encrypt_log_groups(self, storage.run_data_key)
        self._trigger(project, trigger, storage, runs)
        self._outputs(project, storage)

    def _tracking(self, runs: PipelineRuns, storage: StorageStack) -> None:
        """MLflow: the jobs log to their profiles' tracking servers; with teams, the team's own server."""
        grant_mlflow_tracking(self.sagemaker_role, runs.profiles)
        if runs.tracking_server is not None:
            self.tracking_server = TeamTrackingServer(
                self, "TrackingServer", name=runs.tracking_server, artifact_bucket=storage.artifact_bucket
            )

    def _trigger(
        self, project: str, trigger: RetrainOnNewData | None, storage: StorageStack, runs: PipelineRuns
    ) -> None:
        """Retrain on new data (docs/trigger.md), or the kept state table of a trigger turned off."""
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

    def _outputs(self, project: str, storage: StorageStack) -> None:
        """What the CLI reads (trainstack start/status) and a person needs to start or follow a run."""
        team_access = getattr(self, "team_access", None)  # with teams only
        publish_team_code(self, project, storage, team_access)
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
