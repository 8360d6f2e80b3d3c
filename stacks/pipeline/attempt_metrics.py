"""What the pipeline publishes to CloudWatch after each attempt (PutMetricData from the state machine), and
the names the dashboard and alarms read (monitoring.py).

Namespace `trainstack/<project>`:
- `Attempts`, dimension `Outcome` (the attempt statuses of attempt/training_attempt.py): 1 per attempt.
- `FailedAttempts`, dimension `Fault` (trainstack.faults' classes: infrastructure, user, unknown): 1 per
  attempt whose job failed, as the attempt machine classified it (retried or not).
- `CapacityWaitSeconds`, no dimension: after an attempt that found no capacity (`Capacity`), the seconds
  since the run's execution started, i.e. how long this run has been without capacity so far. Its
  Maximum over a period is the longest any run had waited; the attempt that gets capacity publishes none.
- `QuotaWaits`, dimension `Quota` (the quota's name, `ml.p5.48xlarge for training job usage`): 1 per
  attempt that SageMaker refused because other jobs hold that quota (quota_waits.py: a busy quota).

Metrics are best effort: a failed PutMetricData is caught and the run goes on (they never decide a run).
"""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.pipeline.jsonata_text import expression, literal

ATTEMPTS = "Attempts"
CAPACITY_WAIT_SECONDS = "CapacityWaitSeconds"
OUTCOME_DIMENSION = "Outcome"
FAILED_ATTEMPTS = "FailedAttempts"
FAULT_DIMENSION = "Fault"
QUOTA_WAITS = "QuotaWaits"
QUOTA_DIMENSION = "Quota"
# The outcome of an attempt SageMaker could not give capacity to (attempt/training_attempt.py).
NO_CAPACITY_OUTCOME = "Capacity"


def metrics_namespace(project: str) -> str:
    return f"trainstack/{project}"


def metric_data_expression() -> str:
    """MetricData of one attempt, from the pipeline's `$outcome` (a Failed one carries its `fault`) and the
    execution's start time."""
    attempts = (
        f'{{"MetricName": {literal(ATTEMPTS)}, "Unit": "Count", "Value": 1, '
        f'"Dimensions": [{{"Name": {literal(OUTCOME_DIMENSION)}, "Value": $outcome.status}}]}}'
    )
    waited = (
        f'{{"MetricName": {literal(CAPACITY_WAIT_SECONDS)}, "Unit": "Seconds", '
        '"Value": ($millis() - $toMillis($states.context.Execution.StartTime)) / 1000}'
    )
    faulted = (
        f'{{"MetricName": {literal(FAILED_ATTEMPTS)}, "Unit": "Count", "Value": 1, '
        f'"Dimensions": [{{"Name": {literal(FAULT_DIMENSION)}, "Value": $outcome.fault.class}}]}}'
    )
    quota_wait = (
        f'{{"MetricName": {literal(QUOTA_WAITS)}, "Unit": "Count", "Value": 1, '
        f'"Dimensions": [{{"Name": {literal(QUOTA_DIMENSION)}, "Value": $outcome.quota.name}}]}}'
    )
    return (
        f"$append([{attempts}], "
        f"$outcome.status = {literal(NO_CAPACITY_OUTCOME)} ? [{waited}] : "
        f'$outcome.status = "Failed" ? [{faulted}] : '
        f'$outcome.status = "Quota" and $outcome.quota.busy = true ? [{quota_wait}] : [])'
    )


def publish_attempt_metrics(
    scope: Construct, construct_id: str, *, project: str, partition: str
) -> sfn.CustomState:
    """The PutMetricData task (aws-sdk:cloudwatch). A custom state, so that the role's statement can carry
    the namespace condition (grant_publish) instead of CallAwsService's unconditioned one."""
    return sfn.CustomState(
        scope,
        construct_id,
        state_json={
            "Type": "Task",
            "Comment": "Attempt outcome and capacity wait to CloudWatch (best effort: errors are caught).",
            "Resource": f"arn:{partition}:states:::aws-sdk:cloudwatch:putMetricData",
            "Arguments": {
                "Namespace": metrics_namespace(project),
                "MetricData": expression(metric_data_expression()),
            },
            "Output": {},
        },
    )


def grant_publish(role: iam.IRole, project: str) -> None:
    """PutMetricData has no resource-level permissions; the namespace condition scopes it."""
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="PublishAttemptMetrics",
            actions=["cloudwatch:PutMetricData"],
            resources=["*"],
            conditions={"StringEquals": {"cloudwatch:namespace": metrics_namespace(project)}},
        )
    )
