"""No orphaned jobs: when a pipeline execution fails, times out or is aborted, stop its training jobs.

An EventBridge rule on the pipeline's "Step Functions Execution Status Change" events starts a small
state machine with the event as input. It searches the InProgress training jobs tagged with the
execution's ARN (trainstack.job_request.EXECUTION_TAG) and stops each of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.training_state_machine import literal_partition, training_job_arn
from stacks.training_state_machine_definition import THROTTLE_RETRY, definition_json, sagemaker_resource
from stacks.validation import acknowledge
from stacks.wildcard_acknowledgments import acknowledge_wildcard_statements
from trainstack.job_request import EXECUTION_TAG

# Execution statuses after which a job of that execution must not keep running.
ENDED_UNSUCCESSFULLY = ("FAILED", "TIMED_OUT", "ABORTED")
EXECUTION_STATUS_CHANGE = "Step Functions Execution Status Change"


def execution_status_pattern(
    state_machine: sfn.IStateMachine, statuses: Iterable[str]
) -> events.EventPattern:
    """EventBridge pattern for the given execution statuses of one state machine."""
    return events.EventPattern(
        source=["aws.states"],
        detail_type=[EXECUTION_STATUS_CHANGE],
        detail={"stateMachineArn": [state_machine.state_machine_arn], "status": list(statuses)},
    )


def cleanup_definition(partition: str) -> dict[str, Any]:
    """Input: the EventBridge event; `detail.executionArn` names the execution whose jobs to stop."""
    return {
        "Comment": "Stop the InProgress training jobs of a pipeline execution that ended unsuccessfully.",
        "QueryLanguage": "JSONPath",
        "StartAt": "FindJobs",
        "TimeoutSeconds": 3600,
        "States": {
            "FindJobs": {
                "Type": "Task",
                "Resource": sagemaker_resource(partition, "search"),
                "Parameters": {
                    "Resource": "TrainingJob",
                    "MaxResults": 100,
                    "SearchExpression": {
                        "Filters": [
                            {
                                "Name": f"Tags.{EXECUTION_TAG}",
                                "Operator": "Equals",
                                "Value.$": "$.detail.executionArn",
                            },
                            {"Name": "TrainingJobStatus", "Operator": "Equals", "Value": "InProgress"},
                        ]
                    },
                },
                "ResultSelector": {"jobs.$": "$.Results"},
                "ResultPath": "$.found",
                "Retry": [THROTTLE_RETRY],
                "Next": "StopJobs",
            },
            "StopJobs": {
                "Type": "Map",
                "ItemsPath": "$.found.jobs",
                "ItemSelector": {"name.$": "$$.Map.Item.Value.TrainingJob.TrainingJobName"},
                "MaxConcurrency": 5,
                "ItemProcessor": {
                    "ProcessorConfig": {"Mode": "INLINE"},
                    "StartAt": "StopTrainingJob",
                    "States": {
                        "StopTrainingJob": {
                            "Type": "Task",
                            "Resource": sagemaker_resource(partition, "stopTrainingJob"),
                            "Parameters": {"TrainingJobName.$": "$.name"},
                            "ResultPath": None,
                            "Retry": [THROTTLE_RETRY],
                            # The job ended between the search and the stop: nothing left to do.
                            "Catch": [
                                {
                                    "ErrorEquals": ["SageMaker.ValidationException"],
                                    "ResultPath": None,
                                    "Next": "AlreadyEnded",
                                }
                            ],
                            "End": True,
                        },
                        "AlreadyEnded": {"Type": "Succeed"},
                    },
                },
                "ResultSelector": {"stopped.$": "$[*].name"},
                "End": True,
            },
        },
    }


class JobCleanup(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, project: str, pipeline: sfn.IStateMachine
    ) -> None:
        super().__init__(scope, construct_id)
        log_group = logs.LogGroup(
            self,
            "Logs",
            log_group_name=f"/aws/vendedlogs/states/{project}-job-cleanup",
            retention=logs.RetentionDays.THREE_MONTHS,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("states.amazonaws.com"),
            description=f"{project} job cleanup: find an execution's training jobs and stop them",
        )
        role.add_to_policy(iam.PolicyStatement(actions=["sagemaker:Search"], resources=["*"]))
        role.add_to_policy(
            iam.PolicyStatement(
                sid="StopOwnTrainingJobs",
                actions=["sagemaker:StopTrainingJob"],
                resources=[training_job_arn(self, f"{project}-*")],
            )
        )
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            state_machine_name=f"{project}-job-cleanup",
            state_machine_type=sfn.StateMachineType.STANDARD,
            definition_body=sfn.DefinitionBody.from_string(
                definition_json(cleanup_definition(literal_partition(self)))
            ),
            role=role,
            tracing_enabled=True,
            logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ALL, include_execution_data=True),
        )
        self.rule = events.Rule(
            self,
            "OnExecutionEnded",
            description=f"Stop the jobs of {project} pipeline executions that failed, timed out, aborted",
            event_pattern=execution_status_pattern(pipeline, ENDED_UNSUCCESSFULLY),
        )
        self.rule.add_target(targets.SfnStateMachine(self.state_machine))
        acknowledge(
            role,
            "AwsSolutions-IAM5[Resource::*]",
            "sagemaker:Search and the CloudWatch Logs delivery and X-Ray actions support no resource-level "
            "permissions; stopping is limited to the project's training jobs.",
        )
        acknowledge_wildcard_statements(
            role,
            {
                "StopOwnTrainingJobs": "The jobs to stop are found at run time; "
                "the project prefix is the narrowest fixed scope."
            },
        )
