"""The project's operations view: a CloudWatch dashboard and the alarms that tell the notification topic.

Sources (docs/pipeline.md, "Dashboard and alarms", says what each widget and alarm shows and why):
- `AWS/States`: the pipeline's and the cleanup machines' executions (StateMachineArn dimension).
- `trainstack/<project>` (attempt_metrics.py): attempts by outcome, capacity and quota waits, which the
  pipeline publishes itself; `RunsFailed` and `OrphansStopped`, metric filters on the machines' execution logs
  (level ALL: one JSON event per history event, `type` and `details` as Step Functions logs them).
- `/aws/sagemaker/TrainingJobs`: the profiles' MetricDefinitions (dimension TrainingJobName) and the
  training instances' utilization (dimension Host = `<job name>/algo-<n>`) of the project's jobs, found
  by SEARCH because job names are chosen per run.
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.pipeline.attempt.training_attempt import ATTEMPT_STATUSES
from stacks.pipeline.attempt_metrics import (
    ATTEMPTS,
    CAPACITY_WAIT_SECONDS,
    FAILED_ATTEMPTS,
    FAULT_DIMENSION,
    OUTCOME_DIMENSION,
    QUOTA_DIMENSION,
    QUOTA_WAITS,
    metrics_namespace,
)
from stacks.pipeline.logged_state_machine import execution_log_group_name
from stacks.pipeline.state_machine_facts import ERROR_INVALID_INPUT
from trainstack.faults import INFRASTRUCTURE, UNKNOWN, USER

# Where SageMaker publishes training jobs' metrics (fixed by SageMaker).
TRAINING_METRICS_NAMESPACE = "/aws/sagemaker/TrainingJobs"
RUNS_FAILED = "RunsFailed"
ORPHANS_STOPPED = "OrphansStopped"
# A run that has had no capacity this long is worth a person's look (another instance type, a training
# plan) long before the default 48 h retry deadline gives up.
CAPACITY_WAIT_ALARM_HOURS = 6
# Infrastructure faults (each retried from the checkpoint while the profile's fault_retries allow) in one
# hour, over all runs: one or two are routine for a large fleet; this many point at a bad instance type,
# Availability Zone or image, which retries will not cure.
INFRASTRUCTURE_FAULTS_ALARM_COUNT = 3
ALARM_PERIOD = cdk.Duration.minutes(5)
# Sweepers run every 15 minutes: one period sees every sweep.
SWEEP_PERIOD = cdk.Duration.minutes(15)
# The profiles' MetricDefinitions (training_scripts/metrics.py) shown, by graph.
TRAINING_GRAPHS = {
    "Loss (train, validation)": ("train:loss", "validation:loss"),
    "Throughput (tokens/s)": ("train:tokens_per_second",),
    "Model FLOPs utilization (%)": ("train:mfu_percent",),
    # A slow host: 2 or more (training_scripts/rank_health.py, docs/training.md "Slow hosts").
    "Slowest rank (x the other ranks' median step share)": ("train:slowest_rank_ratio",),
}
# SageMaker's instance metrics of training jobs (percent; GPU ones summed over the instance's GPUs).
INSTANCE_METRICS = (
    "GPUUtilization",
    "GPUMemoryUtilization",
    "CPUUtilization",
    "MemoryUtilization",
    "DiskUtilization",
)


# What the metric filters match, one place for the template and the tests.
RUN_FAILED_PATTERN = f'{{ $.type = "ExecutionFailed" && $.details.error != "{ERROR_INVALID_INPUT}" }}'
STOPPED_ORPHAN_PATTERNS = {
    # The sweeper's StopOrphan task succeeded (a failed stop is caught and is no TaskSucceeded).
    "job-sweeper": '{ $.type = "TaskSucceeded" && $.details.resource = "stopTrainingJob" }',
    # Queue mode: the queue sweeper's TerminateOrphanedJob succeeded.
    "queue-sweeper": '{ $.type = "TaskSucceeded" && $.details.resource = "terminateServiceJob" }',
}


class PipelineMonitoring(Construct):
    """Dashboard `<project>-training` and the alarms, each with the topic as its alarm action."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        project: str,
        pipeline: sfn.StateMachine,
        pipeline_log_group: logs.ILogGroup,
        cleanup_machines: Sequence[sfn.StateMachine],
        sweepers: Sequence[sfn.StateMachine],
        topic: sns.ITopic,
    ) -> None:
        super().__init__(scope, construct_id)
        self._project = project
        namespace = metrics_namespace(project)
        runs_failed = logs.MetricFilter(
            self,
            "RunsFailedFilter",
            log_group=pipeline_log_group,
            filter_pattern=logs.FilterPattern.literal(RUN_FAILED_PATTERN),
            metric_namespace=namespace,
            metric_name=RUNS_FAILED,
            metric_value="1",
        )
        for sweeper in sweepers:
            self._orphan_filter(sweeper, namespace)
        self.alarms = [
            *self._run_and_cleanup_alarms(pipeline, runs_failed, cleanup_machines, namespace),
            *self._attempt_and_quota_alarms(pipeline, namespace),
        ]
        for alarm in self.alarms:
            alarm.add_alarm_action(cloudwatch_actions.SnsAction(topic))
        self.dashboard = cloudwatch.Dashboard(
            self,
            "Dashboard",
            dashboard_name=f"{project}-training",
            default_interval=cdk.Duration.days(7),
            widgets=[
                self._pipeline_row(pipeline, namespace, runs_failed),
                self._training_row(),
                self._instance_row(),
            ],
        )

    def _run_and_cleanup_alarms(
        self,
        pipeline: sfn.StateMachine,
        runs_failed: logs.MetricFilter,
        cleanup_machines: Sequence[sfn.StateMachine],
        namespace: str,
    ) -> list[cloudwatch.Alarm]:
        project = self._project
        return [
            self._alarm(
                "RunFailed",
                f"A {project} run failed for a reason other than {ERROR_INVALID_INPUT}, or timed out",
                cloudwatch.MathExpression(
                    expression="failed + timedOut",
                    using_metrics={
                        "failed": runs_failed.metric(statistic="Sum", period=ALARM_PERIOD),
                        "timedOut": pipeline.metric_timed_out(statistic="Sum", period=ALARM_PERIOD),
                    },
                    period=ALARM_PERIOD,
                ),
            ),
            self._alarm(
                "CleanupFailed",
                f"A {project} cleanup or sweeper execution failed or timed out: jobs may be left running",
                self._sum_of(
                    metric
                    for machine in cleanup_machines
                    for metric in (
                        machine.metric_failed(statistic="Sum", period=ALARM_PERIOD),
                        machine.metric_timed_out(statistic="Sum", period=ALARM_PERIOD),
                    )
                ),
            ),
            self._alarm(
                "OrphanStopped",
                f"A {project} sweeper stopped a training job or queued job whose execution had ended: the "
                "cleanup on the execution's end missed it",
                # Every sweeper's filter publishes to this one metric.
                cloudwatch.Metric(
                    namespace=namespace, metric_name=ORPHANS_STOPPED, statistic="Sum", period=SWEEP_PERIOD
                ),
            ),
        ]

    def _attempt_and_quota_alarms(self, pipeline: sfn.StateMachine, namespace: str) -> list[cloudwatch.Alarm]:
        project = self._project
        return [
            self._alarm(
                "CapacityWaitLong",
                f"A {project} run has been without capacity for {CAPACITY_WAIT_ALARM_HOURS} hours or more",
                cloudwatch.Metric(
                    namespace=namespace,
                    metric_name=CAPACITY_WAIT_SECONDS,
                    statistic="Maximum",
                    period=cdk.Duration.hours(1),
                ),
                threshold=CAPACITY_WAIT_ALARM_HOURS * 3600,
            ),
            self._alarm(
                "InfrastructureFaults",
                f"{INFRASTRUCTURE_FAULTS_ALARM_COUNT} or more {project} attempts failed for the "
                "infrastructure's fault (hang, NCCL/EFA, network, hardware, SageMaker internal) within an "
                "hour: retries resume them, but the fleet, the zone or the image needs a look",
                self._failed_attempts(namespace, INFRASTRUCTURE, cdk.Duration.hours(1)),
                threshold=INFRASTRUCTURE_FAULTS_ALARM_COUNT,
            ),
            self._alarm(
                "ExecutionThrottled",
                f"Step Functions throttled state transitions of the {project} pipeline (account quota)",
                pipeline.metric_throttled(statistic="Sum", period=ALARM_PERIOD),
            ),
        ]

    def _orphan_filter(self, sweeper: sfn.StateMachine, namespace: str) -> None:
        name = sweeper.node.default_child.state_machine_name
        kind = name.removeprefix(f"{self._project}-")
        metric_filter = logs.MetricFilter(
            self,
            f"OrphansStopped-{kind}",
            # The log group logged_state_machine made for the sweeper (it must exist first).
            log_group=logs.LogGroup.from_log_group_name(self, f"{kind}Logs", execution_log_group_name(name)),
            filter_pattern=logs.FilterPattern.literal(STOPPED_ORPHAN_PATTERNS[kind]),
            metric_namespace=namespace,
            metric_name=ORPHANS_STOPPED,
            metric_value="1",
        )
        metric_filter.node.add_dependency(sweeper)

    def _alarm(
        self, construct_id: str, description: str, metric: cloudwatch.IMetric, *, threshold: float = 1
    ) -> cloudwatch.Alarm:
        return cloudwatch.Alarm(
            self,
            construct_id,
            alarm_description=description,
            metric=metric,
            threshold=threshold,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            # No data: nothing happened (the metrics are published only when something does).
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )

    @staticmethod
    def _failed_attempts(namespace: str, fault_class: str, period: cdk.Duration) -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace=namespace,
            metric_name=FAILED_ATTEMPTS,
            dimensions_map={FAULT_DIMENSION: fault_class},
            statistic="Sum",
            period=period,
        )

    @staticmethod
    def _sum_of(metrics) -> cloudwatch.MathExpression:
        using = {f"m{index}": metric for index, metric in enumerate(metrics)}
        return cloudwatch.MathExpression(
            expression=" + ".join(using), using_metrics=using, period=ALARM_PERIOD
        )

    def _pipeline_row(
        self, pipeline: sfn.StateMachine, namespace: str, runs_failed: logs.MetricFilter
    ) -> list[cloudwatch.IWidget]:
        hour = cdk.Duration.hours(1)
        executions = cloudwatch.GraphWidget(
            title="Pipeline executions (per hour)",
            left=[
                pipeline.metric_started(statistic="Sum", period=hour, label="started"),
                pipeline.metric_succeeded(statistic="Sum", period=hour, label="succeeded"),
                pipeline.metric_failed(statistic="Sum", period=hour, label="failed"),
                runs_failed.metric(statistic="Sum", period=hour, label=f"failed, not {ERROR_INVALID_INPUT}"),
                pipeline.metric_timed_out(statistic="Sum", period=hour, label="timed out"),
                pipeline.metric_aborted(statistic="Sum", period=hour, label="aborted"),
            ],
            width=8,
        )
        attempts = cloudwatch.GraphWidget(
            title="Attempts by outcome (per hour)",
            left=[
                cloudwatch.Metric(
                    namespace=namespace,
                    metric_name=ATTEMPTS,
                    dimensions_map={OUTCOME_DIMENSION: status},
                    statistic="Sum",
                    period=hour,
                    label=status,
                )
                for status in ATTEMPT_STATUSES
            ],
            stacked=True,
            width=8,
        )
        waited = cloudwatch.MathExpression(
            expression="waited / 3600",
            using_metrics={
                "waited": cloudwatch.Metric(
                    namespace=namespace, metric_name=CAPACITY_WAIT_SECONDS, statistic="Maximum", period=hour
                )
            },
            label="longest time a run has been without capacity (hours)",
            period=hour,
        )
        capacity = cloudwatch.GraphWidget(
            title="Waiting for capacity (hours, longest run)",
            left=[waited],
            left_annotations=[
                cloudwatch.HorizontalAnnotation(
                    value=CAPACITY_WAIT_ALARM_HOURS, label="alarm CapacityWaitLong"
                )
            ],
            width=8,
        )
        faults = cloudwatch.GraphWidget(
            title="Failed attempts by fault (per hour)",
            left=[
                self._failed_attempts(namespace, fault, hour).with_(label=fault)
                for fault in (INFRASTRUCTURE, USER, UNKNOWN)
            ],
            left_annotations=[
                cloudwatch.HorizontalAnnotation(
                    value=INFRASTRUCTURE_FAULTS_ALARM_COUNT, label="alarm InfrastructureFaults"
                )
            ],
            stacked=True,
            width=8,
        )
        alarms = cloudwatch.AlarmStatusWidget(title="Alarms", alarms=self.alarms, width=16, height=6)
        return [executions, attempts, capacity, faults, self._quota_waits(namespace), alarms]

    @staticmethod
    def _quota_waits(namespace: str) -> cloudwatch.GraphWidget:
        """One line per quota: the metric's dimension is the quota's name, known only at run time."""
        return cloudwatch.GraphWidget(
            title="Quota waits by quota (per hour)",
            left=[
                cloudwatch.SearchExpression(
                    expression=(
                        f"SEARCH('{{{namespace},{QUOTA_DIMENSION}}} "
                        f"MetricName=\"{QUOTA_WAITS}\"', 'Sum', 3600)"
                    ),
                    label="",
                )
            ],
            width=8,
        )

    def _search(self, dimension: str, metric_name: str, label: str) -> cloudwatch.SearchExpression:
        # Unquoted: a partial match, on the tokens of the job name (or Host `<job name>/algo-<n>`), which
        # start with the project's name.
        return cloudwatch.SearchExpression(
            expression=(
                f"SEARCH('{{{TRAINING_METRICS_NAMESPACE},{dimension}}} {dimension}={self._project} "
                f"MetricName=\"{metric_name}\"', 'Average', 60)"
            ),
            label=label,
        )

    def _training_row(self) -> list[cloudwatch.IWidget]:
        return [
            cloudwatch.GraphWidget(
                title=title,
                left=[self._search("TrainingJobName", name, name) for name in names],
                width=8,
            )
            for title, names in TRAINING_GRAPHS.items()
        ]

    def _instance_row(self) -> list[cloudwatch.IWidget]:
        return [
            cloudwatch.GraphWidget(
                title=f"{name} of training instances (%)",
                left=[self._search("Host", name, "")],
                width=8,
            )
            for name in INSTANCE_METRICS
        ]
