"""Evaluation, registration and the approval gate, as their own state machine
(`<project>-pipeline-registration`) started by the pipeline after a Completed attempt (docs/registry.md,
"From run to approved model").

The machine: create the evaluation job (the run's request in evaluation mode, evaluation_request.py),
poll it, read its FinalMetricDataList, and retry it as a new job for capacity, a busy quota or the
infrastructure's fault on the profile's budgets (evaluation_states.py);
then, holding the group's lease (group_lease.py), read every Approved version of the group and decide by the
baseline rule (version_request.py); create the model package version (pending, idempotent) and give it the
decision with UpdateModelPackage (the comparison in ApprovalDescription). Its
output, always (the execution succeeds): {"status": "Registered", "modelPackageArn", "version", "decision",
"reason", "evaluation", "baseline"} or {"status": "EvaluationFailed" | "RegistrationFailed", "cause"}; the
pipeline fails such a run with the error of that name, and keeps its model.

Each profile with a `registry:` block gets its model package group `<project>-<profile>` in the stack,
kept when the stack is deleted (its versions are the registry's record).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.pipeline.attempt.queued_training_attempt import queue_attempt_fields
from stacks.pipeline.attempt_metrics import grant_publish, metrics_namespace
from stacks.pipeline.jsonata_text import expression, literal
from stacks.pipeline.logged_state_machine import logged_state_machine
from stacks.pipeline.quota_waits import request_without_skipped
from stacks.pipeline.registry.evaluation_request import (
    registry_table,
)
from stacks.pipeline.registry.evaluation_states import BUDGET_EXCEEDED, EVALUATION_FAILED
from stacks.pipeline.registry.group_lease import lease_table
from stacks.pipeline.registry.registration_states import (
    EVALUATION_LOSS,
    PROFILE_DIMENSION,
    registration_chain,
)
from stacks.pipeline.request_guard import allowed_requests
from stacks.pipeline.state_machine_facts import (
    ERROR_BUDGET_EXCEEDED,
    ERROR_REGISTRATION_FAILED,
    resource_value,
    substitution_names,
    with_placeholders,
)
from stacks.validation import acknowledge
from stacks.wildcard_acknowledgments import acknowledge_wildcard_statements
from trainstack.job_request import PipelineResources
from trainstack.pipeline_runs import PipelineRuns
from trainstack.profiles import Profile
from trainstack.registry import group_name


@dataclass(frozen=True)
class _DatasetBucket:
    """What DatasetManifest reads of its bucket."""

    bucket_name: str
    bucket_arn: str


# The pipeline's error for a run whose evaluation failed (its model is kept, not registered).
ERROR_EVALUATION_FAILED = EVALUATION_FAILED


class ModelRegistration(Construct):
    """The registration machine (`state_machine`), the profiles' groups and the pipeline's hook (`after`)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        runs: PipelineRuns,
        resources: PipelineResources,
        sagemaker_role: iam.IRole,
        *,
        attempt_machine: sfn.IStateMachine,
        queued: bool,
    ) -> None:
        """attempt_machine: the pipeline's, which runs each evaluation job (`queued`: through Batch)."""
        super().__init__(scope, construct_id)
        self.runs, self.queued = runs, queued
        project, profiles = runs.project, runs.profiles
        self.project, self.profiles, self.limits = project, profiles, runs.limits
        self.registered_profiles = [profile for profile in profiles if profile.registry is not None]
        # Deploy-time values appear as ${Name} placeholders, which DefinitionSubstitutions fill.
        self.table_resources = with_placeholders(resources)
        self.table = registry_table(project, profiles, self.table_resources)
        self.state_machine: sfn.StateMachine | None = None
        self.groups = self._groups(runs.kept_groups)
        if not self.table:
            return  # no profile has a registry: block: no machine, no grants
        stack = cdk.Stack.of(self)
        self.package_arns = self._package_arns(group_name(project, name) for name in self.table)
        self.inherited_arns = self._inherit_groups(runs.inherited)
        # The manifests list the dataset bucket: named in the definition by its ${DatasetBucket} placeholder
        # (CDK refuses it as a bucket name: DatasetManifest reads only these two attributes), granted by ARN.
        self.dataset_bucket = _DatasetBucket(
            bucket_name=self.table_resources.dataset_bucket,
            bucket_arn=cdk.Stack.of(self).format_arn(
                service="s3", region="", account="", resource=resources.dataset_bucket
            ),
        )
        self.dataset_prefix = resources.dataset_prefix
        self.resources = resources
        self.state_machine, self.log_group = logged_state_machine(
            self,
            "StateMachine",
            name=f"{project}-pipeline-registration",
            chain=registration_chain(
                self,
                project=project,
                table=self.table,
                dataset_bucket=self.dataset_bucket,
                dataset_prefix=self.dataset_prefix,
                package_arns=self.package_arns,
                inherited_arns=self.inherited_arns,
                attempt_machine=attempt_machine,
                queued=queued,
                repository_arn=stack.format_arn(
                    service="ecr", resource="repository", resource_name=f"{project}-training"
                ),
                allowed=allowed_requests(runs, self.table_resources, self.registered_profiles),
                leases=lease_table(self, project),
            ),
            timeout=None,
        )
        for name in self.table:
            self.state_machine.node.add_dependency(self.groups[name])
        machine = self.state_machine.node.default_child
        assert isinstance(machine, sfn.CfnStateMachine)
        machine.definition_substitutions = {
            name: resource_value(resources, path) for name, path in substitution_names(resources).items()
        }
        self._grant()
        grant_publish(self.state_machine.role, project)
        self._grant_evaluation_sets(sagemaker_role, profiles)
        self._acknowledge()

    def _groups(self, kept: Sequence[str]) -> dict[str, sagemaker.CfnModelPackageGroup]:
        """The profiles' groups, and those kept without a registry profile (migrations:
        keep_model_package_groups) in the same place: a registry block added again finds its versions."""
        groups = {group.removeprefix(f"{self.project}-"): group for group in kept}
        groups.update({name: entry["group"] for name, entry in self.table.items()})
        return {name: self._group(name, group) for name, group in groups.items()}

    def _package_arns(self, groups: Iterable[str]) -> list[str]:
        stack = cdk.Stack.of(self)
        return [
            stack.format_arn(service="sagemaker", resource="model-package", resource_name=f"{group}/*")
            for group in groups
        ]

    def _inherit_groups(self, inherited: str | None) -> list[str]:
        """teams[].inherits_single_team_runs: each profile's pre-teams group, read for the baseline after the
        team's own (its table entry's `inheritedGroup`); the ARNs of their versions."""
        if inherited is None:
            return []
        for name, entry in self.table.items():
            entry["inheritedGroup"] = group_name(inherited, name)
        return self._package_arns(entry["inheritedGroup"] for entry in self.table.values())

    def _group(self, profile: str, name: str) -> sagemaker.CfnModelPackageGroup:
        """The group `name` of `profile`'s versions, kept when the stack is deleted (its versions are the
        registry's record). Its description is fixed: changing it would replace the group."""
        group = sagemaker.CfnModelPackageGroup(
            self,
            f"Group-{profile}",
            model_package_group_name=name,
            model_package_group_description=f"Evaluated versions of profile {profile} (trainstack)",
        )
        group.apply_removal_policy(cdk.RemovalPolicy.RETAIN)
        return group

    def after(self, scope: Construct, succeeded: sfn.IChainable) -> sfn.IChainable:
        """The pipeline's states between a Completed attempt and `succeeded`: register the run of a profile
        with a registry block ($registered holds the machine's output), or fail with EvaluationFailed."""
        unregistered = sfn.Pass.jsonata(scope, "NotRegistered", assign={"registered": expression("null")})
        if self.state_machine is None:
            return unregistered.next(succeeded)
        register = tasks.StepFunctionsStartExecution.jsonata(
            scope,
            "EvaluateAndRegister",
            comment="Evaluate the model, register it as a version of the profile's group and gate it.",
            state_machine=self.state_machine,
            integration_pattern=sfn.IntegrationPattern.RUN_JOB,
            associate_with_parent=True,
            name=expression('"register-" & $uuid()'),
            input=sfn.TaskInput.from_object(
                {
                    "profile": expression("$plan.profile"),
                    "runName": expression("$plan.runName"),
                    "executionArn": expression("$states.context.Execution.Id"),
                    "request": expression(request_without_skipped()),
                    "trainingJobs": expression("$trainingJobs"),
                    "modelArtifacts": expression("$outcome.job.artifacts"),
                    # The evaluation jobs run as the attempts do: same time limit, cost cap and queue share.
                    "timeLimitSeconds": expression("$plan.timeLimitSeconds"),
                    "costCap": expression("$costCap"),
                    "spentUsd": expression("$spentUsd"),
                    **(queue_attempt_fields(self.runs.profiles, self.runs.queue) if self.queued else {}),
                }
            ),
            assign={"registered": expression("$states.result.Output")},
            outputs={},
        )
        failed = sfn.Fail.jsonata(
            scope, "EvaluationFailed", error=ERROR_EVALUATION_FAILED, cause=expression("$registered.cause")
        )
        not_registered = sfn.Fail.jsonata(
            scope,
            "RegistrationFailed",
            error=ERROR_REGISTRATION_FAILED,
            cause=expression("$registered.cause"),
        )
        over_budget = sfn.Fail.jsonata(
            scope, "EvaluationOverBudget", error=ERROR_BUDGET_EXCEEDED, cause=expression("$registered.cause")
        )
        outcome = (
            sfn.Choice.jsonata(scope, "IsRegistered")
            .when(sfn.Condition.jsonata(expression(f'$registered.status = "{EVALUATION_FAILED}"')), failed)
            .when(
                sfn.Condition.jsonata(expression(f'$registered.status = "{ERROR_REGISTRATION_FAILED}"')),
                not_registered,
            )
            .when(sfn.Condition.jsonata(expression(f'$registered.status = "{BUDGET_EXCEEDED}"')), over_budget)
            .otherwise(succeeded)
        )
        return (
            sfn.Choice.jsonata(scope, "HasRegistry")
            .when(
                sfn.Condition.jsonata(expression(f"$plan.profile in {literal(list(self.table))}")),
                register.next(outcome),
            )
            .otherwise(unregistered.next(succeeded))
        )

    def notify(self, topic: sns.ITopic) -> events.Rule | None:
        """Route SageMaker's `SageMaker Model Package State Change` events of the profiles' groups (a version
        created, approved or rejected, here or by `trainstack approve|reject`) to the notification topic.
        The event's detail carries the version's ModelPackageArn (its EventBridge schema, as CDK's
        aws_sagemaker.events.SageMakerModelPackageStateChange names its fields)."""
        if not self.table:
            return None
        rule = events.Rule(
            self,
            "OnModelPackageStateChange",
            description="Notify about every change of a registered version's state",
            event_pattern=events.EventPattern(
                source=["aws.sagemaker"],
                detail_type=["SageMaker Model Package State Change"],
                detail={
                    "ModelPackageArn": [
                        events.Match.prefix(arn.removesuffix("*")) for arn in self.package_arns
                    ]
                },
            ),
        )
        detail = events.EventField.from_path
        rule.add_target(
            targets.SnsTopic(
                topic,
                message=events.RuleTargetInput.from_text(
                    f"Model package {detail('$.detail.ModelPackageArn')} is now "
                    f"{detail('$.detail.ModelApprovalStatus')}: {detail('$.detail.ApprovalDescription')}"
                ),
            )
        )
        return rule

    def add_to_dashboard(self, dashboard: cloudwatch.Dashboard) -> None:
        """A row: the evaluation loss of each registered version (one point per version, by profile)."""
        if not self.table:
            return
        metrics = [
            cloudwatch.Metric(
                namespace=metrics_namespace(self.project),
                metric_name=EVALUATION_LOSS,
                dimensions_map={PROFILE_DIMENSION: name},
                statistic="Maximum",
                period=cdk.Duration.minutes(5),
                label=name,
            )
            for name in self.table
        ]
        dashboard.add_widgets(
            cloudwatch.GraphWidget(title="Evaluation loss of each registered version", left=metrics, width=24)
        )

    def _grant(self) -> None:
        """The custom states' actions (the evaluation jobs are the attempt machine's, with its grants; CDK
        grants starting it and following its executions)."""
        # ListModelPackages supports no resource types (Service Authorization Reference, SageMaker).
        self.state_machine.add_to_role_policy(
            iam.PolicyStatement(
                sid="ListModelPackages", actions=["sagemaker:ListModelPackages"], resources=["*"]
            )
        )
        # CreateModelPackage is authorized on the new version alone (resource type model-package).
        self.state_machine.add_to_role_policy(
            iam.PolicyStatement(
                sid="CreateModelPackages",
                actions=["sagemaker:CreateModelPackage"],
                resources=self.package_arns,
            )
        )

    def _acknowledge(self) -> None:
        role = self.state_machine.role
        acknowledge_wildcard_statements(
            role,
            {
                "states:DescribeExecution": "StartExecution.sync follows the evaluation jobs' attempt "
                "executions; their names are generated at run time under the attempt machine's name."
            },
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5[Resource::*]",
            "ListModelPackages supports no resource-level permissions (Service Authorization Reference, "
            "SageMaker); CloudWatch Logs delivery and X-Ray actions added by CDK neither.",
        )
        for arn in self.package_arns + self.inherited_arns:
            acknowledge(
                role,
                f"AwsSolutions-IAM5[Resource::{arn}]",
                "A group's versions are numbered by SageMaker at run time; the group is the narrowest scope.",
            )

    def _grant_evaluation_sets(self, sagemaker_role: iam.IRole, profiles: Sequence[Profile]) -> None:
        """The evaluation jobs read the profiles' evaluation sets (outside the dataset prefix the training
        jobs read) with the jobs' role."""
        prefixes = sorted({p.registry.evaluation_prefix for p in profiles if p.registry is not None})
        if not prefixes:
            return
        sagemaker_role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ListEvaluationSets",
                actions=["s3:ListBucket"],
                resources=[self.dataset_bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{prefix}*" for prefix in prefixes]}},
            )
        )
        sagemaker_role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ReadEvaluationSets",
                actions=["s3:GetObject"],
                resources=[f"{self.dataset_bucket.bucket_arn}/{prefix}*" for prefix in prefixes],
            )
        )
        acknowledge_wildcard_statements(
            sagemaker_role,
            {"ReadEvaluationSets": "Evaluation reads every object under the profiles' evaluation prefixes."},
        )
