"""What the attempt machine's role needs beyond what its tasks grant: creating (or submitting) its own
training jobs, the training plans they name, and passing the job's role.

CreateTrainingJob is granted only for requests in the project's network, on the profiles' instance types,
within the longest runtime and (with FSx) on the project's file system directory: the same rules the
machines check first (request_guard.py), enforced by IAM with the condition keys the Service Authorization
Reference (SageMaker) lists for CreateTrainingJob. Instance counts, the image, the S3 locations and the job
name prefix have no such key: the machines' check alone holds them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import aws_iam as iam
from aws_cdk import aws_stepfunctions as sfn

from stacks.pipeline.queue.training_queue import TrainingQueue
from stacks.pipeline.request_guard import longest_runtime_seconds
from stacks.pipeline.team_access import only_own_run_names, only_own_service_jobs
from stacks.run_data_key import require_run_data_key
from stacks.validation import acknowledge
from stacks.wildcard_acknowledgments import acknowledge_wildcard_statements
from trainstack.job_request import PipelineResources
from trainstack.pipeline_runs import PipelineRuns
from trainstack.profiles import Profile
from trainstack.teams import RunLimits

DESCRIBE_BATCH_JOBS = "DescribeBatchTrainingJobs"
# IAM wildcards for a path with a `.` or `..` segment or an empty one (`*` matches any characters, `/` too).
UNNORMALIZED_PATHS = ["*/.", "*/./*", "*/..", "*/../*", "*//*"]
JOB_NAMES_REASON = (
    "Jobs are named per run and attempt at run time; the project prefix is the narrowest fixed scope."
)


def create_job_conditions(
    resources: PipelineResources, profiles: Sequence[Profile], limits: RunLimits
) -> dict[str, Any]:
    """CreateTrainingJob's conditions: every subnet, security group and instance type of the request is one
    of the project's (ForAllValues; the Null conditions deny a request without them, which ForAllValues
    alone would allow: IAM User Guide, "Single-valued vs. multivalued context keys"), the runtime within
    the longest allowed, and a file system channel only on the project's directory (IfExists: a request
    without one carries no such key)."""
    types = sorted(
        {preference.instance_type for profile in profiles for preference in profile.instance_preferences}
    )
    listed = {
        "sagemaker:VpcSubnets": list(resources.subnet_ids),
        "sagemaker:VpcSecurityGroupIds": list(resources.security_group_ids),
        "sagemaker:InstanceTypes": types,
    }
    conditions: dict[str, Any] = {
        "ForAllValues:StringEquals": listed,
        "Null": {key: "false" for key in listed},
        "NumericLessThanEquals": {
            "sagemaker:MaxRuntimeInSeconds": str(longest_runtime_seconds(profiles, limits.max_runtime_hours))
        },
    }
    if resources.file_system_id is not None and resources.file_system_directory_path is not None:
        directory = resources.file_system_directory_path
        conditions["StringEqualsIfExists"] = {"sagemaker:FileSystemId": resources.file_system_id}
        # The fsx checkpoint store's directory too (mounted rw); both are the team's own.
        directories = [directory, resources.checkpoint_file_system_path]
        conditions["StringLikeIfExists"] = {
            "sagemaker:FileSystemDirectoryPath": [
                path for each in directories if each is not None for path in (each, f"{each}/*")
            ]
        }
        # `<own directory>/*` also matches `<own directory>/../<other team>`: no `.`, `..` or empty
        # segment (the machines' check refuses the same: request_guard.NOT_NORMALIZED).
        conditions["StringNotLikeIfExists"] = {"sagemaker:FileSystemDirectoryPath": UNNORMALIZED_PATHS}
    return conditions


def create_job_statements(job_arn: str, conditions: dict[str, Any], *, sid: str) -> list[iam.PolicyStatement]:
    """CreateTrainingJob on `job_arn` under `conditions` (sid), and AddTags, which a create with Tags needs
    on the new job and which carries none of those keys (sid + "Tags")."""
    return [
        iam.PolicyStatement(
            sid=sid, actions=["sagemaker:CreateTrainingJob"], resources=[job_arn], conditions=conditions
        ),
        iam.PolicyStatement(sid=f"{sid}Tags", actions=["sagemaker:AddTags"], resources=[job_arn]),
    ]


def training_plans(profiles: Sequence[Profile]) -> list[str]:
    """The training plans the profiles' requests name, each once, in config order."""
    plans = (plan for profile in profiles for plan in profile.training_plan_arns if plan)
    return list(dict.fromkeys(plans))


def grant_attempt_role(
    attempt_machine: sfn.StateMachine,
    queue: TrainingQueue | None,
    job_arn: str,
    sagemaker_role: iam.IRole,
    runs: PipelineRuns,
    resources: PipelineResources,
) -> None:
    """What the constructs cannot add: the custom create (or submit) task's actions and passing the
    job's role (to SageMaker, or to Batch, which creates the job with it)."""
    plans = training_plans(runs.profiles)
    if queue is not None:
        # The pipeline's own shares (with teams, the team's) and priority bound.
        queue.grant_submit(attempt_machine.role, list(runs.queue.shares), runs.limits.max_priority)
        # The queue and its run-name table are shared by every team: only the pipeline's own jobs and names.
        only_own_service_jobs(attempt_machine.role, queue.service_job_arn, runs.project)
        only_own_run_names(attempt_machine.role, queue.run_names.arn, runs.project)
    else:
        conditions = create_job_conditions(resources, runs.profiles, runs.limits)
        for statement in create_job_statements(job_arn, conditions, sid="CreateOwnTrainingJobs"):
            attempt_machine.add_to_role_policy(statement)
        require_run_data_key(attempt_machine, job_arn, resources.kms_key_arn)
    if queue is None and plans:
        # A request naming a training plan (InstancePreferences[].TrainingPlanArns) is authorized on the
        # plan too: `training-plan` is a resource type of CreateTrainingJob (Service Authorization
        # Reference, SageMaker), and plan users need permission to use the plan in training jobs
        # (SageMaker Developer Guide, "IAM for SageMaker training plans").
        attempt_machine.add_to_role_policy(
            iam.PolicyStatement(
                sid="UseTrainingPlans", actions=["sagemaker:CreateTrainingJob"], resources=plans
            )
        )
    attempt_machine.add_to_role_policy(
        iam.PolicyStatement(
            actions=["iam:PassRole"],
            resources=[sagemaker_role.role_arn],
            conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
        )
    )
    if queue is not None:
        acknowledge(
            attempt_machine.role,
            f"AwsSolutions-IAM5[Resource::{job_arn}]",
            "The attempt describes the training job Batch started, named per run at run time; the "
            "project prefix is the narrowest fixed scope.",
        )
        acknowledge_wildcard_statements(
            attempt_machine.role,
            {
                DESCRIBE_BATCH_JOBS: "Batch names the training jobs it starts "
                "AWSBatch<jobName><attemptId> at run time; every jobName we submit starts with this "
                "queue's key, which keeps them to this project's runs."
            },
        )
        return
    acknowledge_wildcard_statements(
        attempt_machine.role,
        {"CreateOwnTrainingJobs": JOB_NAMES_REASON, "CreateOwnTrainingJobsTags": JOB_NAMES_REASON},
    )
