"""Evaluation, registration and the approval gate, as their own state machine
(`<project>-pipeline-registration`) started by the pipeline after a Completed attempt (docs/registry.md,
"From run to approved model").

The machine: create the evaluation job (the run's request in evaluation mode, evaluation_request.py),
poll it, read its FinalMetricDataList; find the group's latest Approved version and its evaluation loss;
decide; create the model package version (pending) and give it the decision with UpdateModelPackage
(the comparison in ApprovalDescription). Its output, always (the execution succeeds): {"status":
"Registered", "modelPackageArn", "version", "decision", "reason", "evaluation", "baseline"} or
{"status": "EvaluationFailed", "cause"}; the pipeline fails a run whose evaluation failed with the error
EvaluationFailed, and keeps its model unregistered.

Each profile with a `registry:` block gets its model package group `<project>-<profile>` in the stack,
kept when the stack is deleted (its versions are the registry's record).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.pipeline.dataset_manifest import MANIFEST_VARIABLE, DatasetManifest
from stacks.pipeline.jsonata_text import expression, literal
from stacks.pipeline.logged_state_machine import logged_state_machine
from stacks.pipeline.machine_kit import (
    SAGEMAKER_ERROR,
    literal_partition,
    retry_must_succeed_call,
    retry_poll_call,
)
from stacks.pipeline.pipeline_runs import PipelineRuns
from stacks.pipeline.registry.evaluation_request import (
    EVALUATION_JOB_NAME,
    decision,
    evaluation_metrics,
    evaluation_request,
    model_package_request,
    registry_table,
)
from stacks.pipeline.state_machine_facts import resource_value, substitution_names, with_placeholders
from stacks.validation import acknowledge
from stacks.wildcard_acknowledgments import acknowledge_wildcard_statements
from trainstack.job_request import PipelineResources
from trainstack.profiles import Profile
from trainstack.registry import group_name

EVALUATION_POLL_SECONDS = 60


@dataclass(frozen=True)
class _DatasetBucket:
    """What DatasetManifest reads of its bucket."""

    bucket_name: str
    bucket_arn: str


REGISTERED, EVALUATION_FAILED = "Registered", "EvaluationFailed"
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
        job_arn: str,
        sagemaker_role: iam.IRole,
    ) -> None:
        super().__init__(scope, construct_id)
        project, profiles = runs.project, runs.profiles
        self.profiles = profiles
        # Deploy-time values appear as ${Name} placeholders, which DefinitionSubstitutions fill.
        self.table_resources = with_placeholders(resources)
        self.table = registry_table(project, profiles, self.table_resources)
        self.groups = {}
        for name, entry in self.table.items():
            group = sagemaker.CfnModelPackageGroup(
                self,
                f"Group-{name}",
                model_package_group_name=entry["group"],
                model_package_group_description=f"Evaluated versions of profile {name} (trainstack)",
            )
            group.apply_removal_policy(cdk.RemovalPolicy.RETAIN)
            self.groups[name] = group
        stack = cdk.Stack.of(self)
        groups = [group_name(project, name) for name in self.table]
        self.package_arns = [
            stack.format_arn(service="sagemaker", resource="model-package", resource_name=f"{name}/*")
            for name in groups
        ]
        self.job_arn = job_arn
        # The manifests list the dataset bucket: named in the definition by its ${DatasetBucket} placeholder
        # (CDK refuses it as a bucket name: DatasetManifest reads only these two attributes), granted by ARN.
        self.dataset_bucket = _DatasetBucket(
            bucket_name=self.table_resources.dataset_bucket,
            bucket_arn=cdk.Stack.of(self).format_arn(
                service="s3", region="", account="", resource=resources.dataset_bucket
            ),
        )
        self.dataset_prefix = resources.dataset_prefix
        self.state_machine, self.log_group = logged_state_machine(
            self, "StateMachine", name=f"{project}-pipeline-registration", chain=self._chain(), timeout=None
        )
        for group in self.groups.values():
            self.state_machine.node.add_dependency(group)
        machine = self.state_machine.node.default_child
        assert isinstance(machine, sfn.CfnStateMachine)
        machine.definition_substitutions = {
            name: resource_value(resources, path) for name, path in substitution_names(resources).items()
        }
        self._grant(sagemaker_role)
        self._grant_evaluation_sets(sagemaker_role, profiles)
        self._acknowledge()

    def after(self, scope: Construct, succeeded: sfn.IChainable) -> sfn.IChainable:
        """The pipeline's states between a Completed attempt and `succeeded`: register the run of a profile
        with a registry block ($registered holds the machine's output), or fail with EvaluationFailed."""
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
                    "request": expression("$request"),
                    "attempts": expression("$attempt"),
                    "modelArtifacts": expression("$outcome.job.artifacts"),
                }
            ),
            assign={"registered": expression("$states.result.Output")},
            outputs={},
        )
        failed = sfn.Fail.jsonata(
            scope, "EvaluationFailed", error=ERROR_EVALUATION_FAILED, cause=expression("$registered.cause")
        )
        outcome = (
            sfn.Choice.jsonata(scope, "IsRegistered")
            .when(sfn.Condition.jsonata(expression(f'$registered.status = "{EVALUATION_FAILED}"')), failed)
            .otherwise(succeeded)
        )
        unregistered = sfn.Pass.jsonata(scope, "NotRegistered", assign={"registered": expression("null")})
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

    def _chain(self) -> sfn.IChainable:
        prepare = sfn.Pass.jsonata(
            self,
            "Prepare",
            assign={
                "status": expression("null"),
                "reason": expression("null"),
                "run": expression("$states.input"),
                "settings": expression(f"$lookup({literal(self.table)}, $states.input.profile)"),
            },
        )
        # The training set's and the evaluation set's manifests (trainstack.manifest), as the run registers.
        train_manifest = DatasetManifest(
            self, "TrainingSetManifest", bucket=self.dataset_bucket, prefix=literal(self.dataset_prefix)
        )
        keep_train = sfn.Pass.jsonata(
            self,
            "KeepTrainingSetManifest",
            assign={"trainingSetManifest": expression(f"${MANIFEST_VARIABLE}")},
        )
        eval_manifest = DatasetManifest(
            self, "EvaluationSetManifest", bucket=self.dataset_bucket, prefix="$settings.evaluationPrefix"
        )
        create = self._sdk_call("CreateEvaluationJob", "createTrainingJob", evaluation_request(), {})
        wait = sfn.Wait.jsonata(
            self,
            "WaitForEvaluation",
            time=sfn.WaitTime.duration(cdk.Duration.seconds(EVALUATION_POLL_SECONDS)),
        )
        describe = tasks.CallAwsService.jsonata(
            self,
            "DescribeEvaluationJob",
            service="sagemaker",
            action="describeTrainingJob",
            parameters={"TrainingJobName": expression(EVALUATION_JOB_NAME)},
            iam_resources=[self.job_arn],
            assign={
                "status": expression("$states.result.TrainingJobStatus"),
                "reason": expression("$states.result.FailureReason ? $states.result.FailureReason : null"),
                "evaluation": expression(evaluation_metrics()),
            },
            outputs={},
        )
        retry_poll_call(describe, [SAGEMAKER_ERROR])
        describe.add_catch(wait, errors=[SAGEMAKER_ERROR], outputs={})
        failed = sfn.Succeed.jsonata(
            self,
            "ReportEvaluationFailed",
            outputs=expression(
                f'{{"status": "{EVALUATION_FAILED}", "cause": "Evaluation job " & {EVALUATION_JOB_NAME} '
                '& " " & '
                '($status ? "ended " & $status : "could not start") & ($reason ? ": " & $reason : "") & '
                '". The model stays at " & $run.modelArtifacts & "; it is not registered."}'
            ),
        )
        create.add_catch(
            failed,
            errors=["States.ALL"],
            outputs={},
            assign={"reason": expression("$states.errorOutput.Cause")},
        )
        register = self._register()
        check = (
            sfn.Choice.jsonata(self, "CheckEvaluation")
            .when(sfn.Condition.jsonata(expression('$status in ["InProgress", "Stopping"]')), wait)
            .when(
                sfn.Condition.jsonata(
                    expression('$status = "Completed" and $type($evaluation.loss) = "number"')
                ),
                register,
            )
            .when(
                sfn.Condition.jsonata(expression('$status = "Completed"')),
                failed,
                assign={"reason": expression('"it reported no evaluation:loss metric"')},
            )
            .otherwise(failed)
        )
        manifests = train_manifest.next(keep_train).next(eval_manifest)
        return prepare.next(manifests).next(create).next(wait).next(describe).next(check)

    def _register(self) -> sfn.IChainable:
        list_approved = tasks.CallAwsService.jsonata(
            self,
            "FindApprovedVersion",
            service="sagemaker",
            action="listModelPackages",
            parameters={
                "ModelPackageGroupName": expression("$settings.group"),
                "ModelApprovalStatus": "Approved",
                "ModelPackageType": "Versioned",
                "SortBy": "CreationTime",
                "SortOrder": "Descending",
                "MaxResults": 1,
            },
            iam_resources=["*"],
            assign={
                "baselineArn": expression(
                    "($a := $states.result.ModelPackageSummaryList[0].ModelPackageArn; $a ? $a : null)"
                ),
                "baseline": expression("null"),
            },
            outputs={},
        )
        describe_baseline = tasks.CallAwsService.jsonata(
            self,
            "DescribeApprovedVersion",
            service="sagemaker",
            action="describeModelPackage",
            parameters={"ModelPackageName": expression("$baselineArn")},
            iam_resources=self.package_arns,
            assign={
                "baseline": expression(
                    '($loss := $states.result.CustomerMetadataProperties."evaluation.loss"; $loss ? '
                    '{"arn": $baselineArn, "version": $states.result.ModelPackageVersion, '
                    '"loss": $number($loss)} '
                    ": null)"
                )
            },
            outputs={},
        )
        create_package = self._sdk_call(
            "CreateModelPackage",
            "createModelPackage",
            model_package_request(),
            {"packageArn": expression("$states.result.ModelPackageArn"), "decision": expression(decision())},
        )
        gate = tasks.CallAwsService.jsonata(
            self,
            "ApplyDecision",
            service="sagemaker",
            action="updateModelPackage",
            parameters={
                "ModelPackageArn": expression("$packageArn"),
                "ModelApprovalStatus": expression("$decision.status"),
                "ApprovalDescription": expression("$substring($decision.description, 0, 1024)"),
            },
            iam_resources=self.package_arns,
            outputs={},
        )
        for task in (list_approved, describe_baseline, gate):
            retry_must_succeed_call(task, [SAGEMAKER_ERROR])
        done = sfn.Succeed.jsonata(
            self,
            "Registered",
            outputs=expression(
                f'{{"status": "{REGISTERED}", "modelPackageArn": $packageArn, '
                '"version": $number($split($packageArn, "/")[-1]), "decision": $decision.status, '
                '"reason": $decision.description, "evaluation": $evaluation, "baseline": $baseline}'
            ),
        )
        has_baseline = (
            sfn.Choice.jsonata(self, "HasApprovedVersion")
            .when(sfn.Condition.jsonata(expression("$baselineArn ? true : false")), describe_baseline)
            .otherwise(create_package)
        )
        retry_must_succeed_call(create_package, [SAGEMAKER_ERROR])
        describe_baseline.next(create_package)
        create_package.next(gate).next(done)
        return list_approved.next(has_baseline)

    def _sdk_call(
        self, state_id: str, action: str, arguments: str, assign: dict[str, str]
    ) -> sfn.CustomState:
        """A SageMaker call whose request is one JSONata value (CallAwsService takes an object of fields
        only, hence a custom state); its permissions are granted in `_grant`."""
        return sfn.CustomState(
            self,
            state_id,
            state_json={
                "Type": "Task",
                "Resource": f"arn:{literal_partition(self)}:states:::aws-sdk:sagemaker:{action}",
                "Arguments": expression(arguments),
                "Assign": assign,
                "Output": {},
            },
        )

    def _grant(self, sagemaker_role: iam.IRole) -> None:
        """The custom states' actions and passing the job's role to SageMaker."""
        machine = self.state_machine
        machine.add_to_role_policy(
            iam.PolicyStatement(
                sid="CreateEvaluationJobs",
                actions=["sagemaker:CreateTrainingJob", "sagemaker:AddTags"],
                resources=[self.job_arn],
            )
        )
        # The evaluation job keeps the run's InstancePreferences and the training plans they name, which
        # CreateTrainingJob authorizes too (Service Authorization Reference, SageMaker: training-plan).
        registered = (profile for profile in self.profiles if profile.registry is not None)
        plans = sorted({plan for profile in registered for plan in profile.training_plan_arns if plan})
        if plans:
            machine.add_to_role_policy(
                iam.PolicyStatement(
                    sid="EvaluateOnTrainingPlans", actions=["sagemaker:CreateTrainingJob"], resources=plans
                )
            )
        # CreateModelPackage is authorized on the new version alone (resource type model-package).
        machine.add_to_role_policy(
            iam.PolicyStatement(
                sid="CreateModelPackages",
                actions=["sagemaker:CreateModelPackage"],
                resources=self.package_arns,
            )
        )
        machine.add_to_role_policy(
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=[sagemaker_role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
            )
        )

    def _acknowledge(self) -> None:
        role = self.state_machine.role
        acknowledge(
            role,
            f"AwsSolutions-IAM5[Resource::{self.job_arn}]",
            "Evaluation jobs are named per run at run time; the project prefix is the narrowest fixed scope.",
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5[Resource::*]",
            "ListModelPackages supports no resource-level permissions (Service Authorization Reference, "
            "SageMaker); CloudWatch Logs delivery and X-Ray actions added by CDK neither.",
        )
        for arn in self.package_arns:
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
