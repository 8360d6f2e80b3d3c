"""What the attempt machine's role needs beyond what its tasks grant: creating (or submitting) its own
training jobs, the training plans they name, and passing the job's role."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_iam as iam
from aws_cdk import aws_stepfunctions as sfn

from stacks.pipeline.queue.training_queue import TrainingQueue
from stacks.run_data_key import require_run_data_key
from stacks.validation import acknowledge
from stacks.wildcard_acknowledgments import acknowledge_wildcard_statements
from trainstack.profiles import Profile

# CreateTrainingJob with Tags needs AddTags on the new job.
CREATE_ACTIONS = ("sagemaker:CreateTrainingJob", "sagemaker:AddTags")
DESCRIBE_BATCH_JOBS = "DescribeBatchTrainingJobs"


def training_plans(profiles: Sequence[Profile]) -> list[str]:
    """The training plans the profiles' requests name, each once, in config order."""
    plans = (plan for profile in profiles for plan in profile.training_plan_arns if plan)
    return list(dict.fromkeys(plans))


def grant_attempt_role(
    attempt_machine: sfn.StateMachine,
    queue: TrainingQueue | None,
    job_arn: str,
    sagemaker_role: iam.IRole,
    plans: list[str],
    kms_key_arn: str | None = None,
) -> None:
    """What the constructs cannot add: the custom create (or submit) task's actions and passing the
    job's role (to SageMaker, or to Batch, which creates the job with it)."""
    if queue is not None:
        queue.grant_submit(attempt_machine.role)
    else:
        attempt_machine.add_to_role_policy(
            iam.PolicyStatement(
                sid="CreateOwnTrainingJobs", actions=list(CREATE_ACTIONS), resources=[job_arn]
            )
        )
    if queue is None:
        require_run_data_key(attempt_machine, job_arn, kms_key_arn)
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
        {
            "CreateOwnTrainingJobs": "Jobs are named per run and attempt at run time; "
            "the project prefix is the narrowest fixed scope."
        },
    )
