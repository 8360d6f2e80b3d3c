"""The registration machine's states (model_registration.py): the two manifests, the evaluation
(evaluation_states.py: its jobs, their polling and retries), the baseline, the decision, the version and its
metric."""

from __future__ import annotations

from typing import Any

from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.pipeline.attempt_metrics import metrics_namespace
from stacks.pipeline.dataset_manifest import MANIFEST_VARIABLE, DatasetManifest
from stacks.pipeline.jsonata_text import expression, literal
from stacks.pipeline.machine_kit import SAGEMAKER_ERROR, literal_partition, retry_must_succeed_call
from stacks.pipeline.registry.evaluation_request import evaluation_request
from stacks.pipeline.registry.evaluation_states import evaluation_states, sagemaker_call
from stacks.pipeline.registry.group_lease import LeaseTable, acquire_lease, release_lease
from stacks.pipeline.registry.version_request import approved_facts, baseline, decision, model_package_request
from stacks.pipeline.request_guard import refuse_unless_allowed, registration_problem
from stacks.pipeline.state_machine_facts import ERROR_REGISTRATION_FAILED

# How an ECR error other than its modelled ones reaches a Task (DESIGN.md's rule for aws-sdk tasks).
ECR_THROTTLED = "Ecr.EcrException"
REGISTERED = "Registered"
# The output when the version could not be registered or decided (the pipeline's error of that name).
REGISTRATION_FAILED_OUTPUT = (
    f'{{"status": "{ERROR_REGISTRATION_FAILED}", "cause": "Registration of run " & $run.runName & '
    '" in group " & $settings.group & " failed: " & $failure.Error & ": " & $failure.Cause & '
    '($packageArn ? "; its version " & $packageArn & " stays PendingManualApproval" : '
    '"; no version was created") & ". The model stays at " & $run.modelArtifacts & "."}'
)
# Approved versions read per ListModelPackages page (botocore: MaxResults 1-100), described this many at once.
LIST_PAGE_SIZE, DESCRIBE_CONCURRENCY = 100, 10
# The dashboard's metric: each version's evaluation loss, by profile (namespace trainstack/<project>).
EVALUATION_LOSS, PROFILE_DIMENSION = "EvaluationLoss", "Profile"


def registration_chain(
    scope: Construct,
    *,
    project: str,
    table: dict[str, Any],
    dataset_bucket: Any,
    dataset_prefix: str,
    package_arns: list[str],
    inherited_arns: list[str],
    attempt_machine: sfn.IStateMachine,
    queued: bool,
    repository_arn: str,
    allowed: dict[str, Any],
    leases: LeaseTable,
) -> sfn.IChainable:
    """The registration machine's states (module docstring), from its input to its output; first of all
    the run's request and model checked against `allowed` (request_guard.allowed_requests).
    `inherited_arns`: the versions of the pre-teams groups a team inherited (its table entries'
    `inheritedGroup`), read for the baseline after the team's own group."""
    prepare = sfn.Pass.jsonata(
        scope,
        "Prepare",
        assign={
            "run": expression("$states.input"),
            "imageUri": expression("$states.input.request.AlgorithmSpecification.TrainingImage"),
            "imageDigest": expression("null"),
            # Set in the group's lease (_register): the Approved versions, paging, the version, a failure.
            "approved": expression("[]"),
            "nextToken": expression("null"),
            "packageArn": expression("null"),
            "failure": expression("null"),
            "settings": expression(f"$lookup({literal(table)}, $states.input.profile)"),
            # The group whose Approved versions are being read: the profile's, then an inherited one.
            **({"listGroup": expression("null")} if inherited_arns else {}),
        },
    )
    failed = sfn.Succeed.jsonata(scope, "RegistrationFailed", outputs=expression(REGISTRATION_FAILED_OUTPUT))
    register = _register(scope, project, package_arns, inherited_arns, repository_arn, leases, failed)
    evaluate = evaluation_states(
        scope,
        attempt_machine=attempt_machine,
        request=evaluation_request(),
        queued=queued,
        completed=register,
    )
    prepare.next(_manifests(scope, project, dataset_bucket, dataset_prefix, failed)).next(evaluate)
    return refuse_unless_allowed(scope, registration_problem(allowed), prepare)


def _register(
    scope: Construct,
    project: str,
    package_arns: list[str],
    inherited_arns: list[str],
    repository_arn: str,
    leases: LeaseTable,
    failed: sfn.IChainable,
) -> sfn.IChainable:
    """Inside the group's lease: every Approved version's facts, the version created (idempotently) with the
    gate's decision, the lease released on every path; a failure ends in `failed` (RegistrationFailed)."""
    publish = _publish_evaluation_loss(scope, project)
    outcome = (
        sfn.Choice.jsonata(scope, "IsVersionDecided")
        .when(sfn.Condition.jsonata(expression("$failure ? true : false")), failed)
        .otherwise(publish)
    )
    release = release_lease(scope, leases, "$settings.group", outcome)
    acquire = acquire_lease(scope, leases, "$settings.group")
    listed_group = "($listGroup ? $listGroup : $settings.group)" if inherited_arns else "$settings.group"
    list_page = sagemaker_call(
        scope,
        "ListApprovedVersions",
        "listModelPackages",
        f'$merge([{{"ModelPackageGroupName": {listed_group}, "ModelApprovalStatus": "Approved", '
        '"ModelPackageType": "Versioned", "SortBy": "CreationTime", "SortOrder": "Descending", '
        f'"MaxResults": {LIST_PAGE_SIZE}}}, $nextToken ? {{"NextToken": $nextToken}} : {{}}])',
        {"page": expression("$states.result")},
    )
    describe_page = _describe_approved_versions(scope, package_arns + inherited_arns)
    create_package = sagemaker_call(
        scope,
        "CreateModelPackage",
        "createModelPackage",
        model_package_request(),
        {
            "packageArn": expression("$states.result.ModelPackageArn"),
            "baseline": expression(baseline()),
            "decision": expression(decision()),
        },
    )
    gate = tasks.CallAwsService.jsonata(
        scope,
        "ApplyDecision",
        service="sagemaker",
        action="updateModelPackage",
        parameters={
            "ModelPackageArn": expression("$packageArn"),
            "ModelApprovalStatus": expression("$decision.status"),
            "ApprovalDescription": expression("$substring($decision.description, 0, 1024)"),
        },
        iam_resources=package_arns,
        outputs={},
    )
    for task in (list_page, create_package, gate):
        retry_must_succeed_call(task, [SAGEMAKER_ERROR])
    # Every state of the lease's section: a failure gives the lease back and ends RegistrationFailed.
    for task in (acquire, list_page, describe_page, create_package, gate):
        task.add_catch(
            release, errors=["States.ALL"], outputs={}, assign={"failure": expression("$states.errorOutput")}
        )
    more_pages = _more_pages(scope, list_page, create_package, inherited=bool(inherited_arns))
    acquire.next(list_page).next(describe_page).next(more_pages)
    create_package.next(gate).next(release)
    done = sfn.Succeed.jsonata(
        scope,
        "Registered",
        outputs=expression(
            f'{{"status": "{REGISTERED}", "modelPackageArn": $packageArn, '
            '"version": $number($split($packageArn, "/")[-1]), "decision": $decision.status, '
            '"reason": $decision.description, "evaluation": $evaluation, "baseline": $baseline}'
        ),
    )
    publish.add_catch(done, errors=["States.ALL"], outputs={})
    publish.next(done)
    return _image_digest(scope, repository_arn, acquire)


def _more_pages(
    scope: Construct, list_page: sfn.IChainable, done: sfn.IChainable, *, inherited: bool
) -> sfn.Choice:
    """After a page of Approved versions: the next page, then (`inherited`: teams[].inherits_single_team_runs)
    the pre-teams group of the profile, from its first page, then `done`."""
    more_pages = sfn.Choice.jsonata(scope, "HasMoreApprovedVersions").when(
        sfn.Condition.jsonata(expression("$nextToken ? true : false")), list_page
    )
    if inherited:
        inherited_group = sfn.Pass.jsonata(
            scope, "ReadInheritedGroup", assign={"listGroup": expression("$settings.inheritedGroup")}
        )
        more_pages.when(
            sfn.Condition.jsonata(expression("$not($listGroup) and $exists($settings.inheritedGroup)")),
            inherited_group.next(list_page),
        )
    return more_pages.otherwise(done)


def _describe_approved_versions(scope: Construct, package_arns: list[str]) -> sfn.Map:
    """DescribeModelPackage of each Approved version of the page, their facts appended to $approved (a page
    may be empty and still have a next one: SageMaker filters after paging, DESIGN.md round 6)."""
    describe = tasks.CallAwsService.jsonata(
        scope,
        "DescribeApprovedVersion",
        service="sagemaker",
        action="describeModelPackage",
        parameters={"ModelPackageName": expression("$states.input.ModelPackageArn")},
        iam_resources=package_arns,
        outputs=expression(approved_facts()),
    )
    retry_must_succeed_call(describe, [SAGEMAKER_ERROR])
    pages = sfn.Map.jsonata(
        scope,
        "DescribeApprovedVersions",
        items=sfn.ProvideItems.jsonata(
            expression("$exists($page.ModelPackageSummaryList) ? $page.ModelPackageSummaryList : []")
        ),
        max_concurrency=DESCRIBE_CONCURRENCY,
        assign={
            "approved": expression("$append($approved, $states.result)"),
            "nextToken": expression("$page.NextToken ? $page.NextToken : null"),
        },
        outputs={},
    )
    pages.item_processor(describe)
    return pages


def _manifests(
    scope: Construct, project: str, dataset_bucket: Any, dataset_prefix: str, failed: sfn.IChainable
) -> sfn.IChainable:
    """The training set's and the evaluation set's manifests (trainstack.manifest), as the run registers:
    $trainingSetManifest and $datasetManifest. A listing that fails (an S3 error, `DatasetTooLarge`) ends
    in `failed` with that error, before any evaluation job."""
    train_manifest = DatasetManifest(
        scope, "TrainingSetManifest", project=project, bucket=dataset_bucket, prefix=literal(dataset_prefix)
    )
    keep_train = sfn.Pass.jsonata(
        scope,
        "KeepTrainingSetManifest",
        assign={"trainingSetManifest": expression(f"${MANIFEST_VARIABLE}")},
    )
    eval_manifest = DatasetManifest(
        scope,
        "EvaluationSetManifest",
        project=project,
        bucket=dataset_bucket,
        prefix="$settings.evaluationPrefix",
    )
    for manifest in (train_manifest, eval_manifest):
        manifest.add_catch(failed, assign={"failure": expression("$states.errorOutput")})
    return train_manifest.next(keep_train).next(eval_manifest)


def _publish_evaluation_loss(scope: Construct, project: str) -> sfn.CustomState:
    """PutMetricData of the version's evaluation loss (custom state: grant_publish's namespace condition)."""
    return sfn.CustomState(
        scope,
        "PublishEvaluationLoss",
        state_json={
            "Type": "Task",
            "Comment": "The version's evaluation loss for the dashboard (best effort: errors are caught).",
            "Resource": f"arn:{literal_partition(scope)}:states:::aws-sdk:cloudwatch:putMetricData",
            "Arguments": {
                "Namespace": metrics_namespace(project),
                "MetricData": expression(
                    f'[{{"MetricName": "{EVALUATION_LOSS}", "Value": $evaluation.loss, "Dimensions": '
                    f'[{{"Name": "{PROFILE_DIMENSION}", "Value": $run.profile}}]}}]'
                ),
            },
            "Output": {},
        },
    )


def _image_digest(scope: Construct, repository_arn: str, then: sfn.IChainable) -> sfn.IChainable:
    """$imageUri: the run's image as `<registry>/<repository>@<digest>` (ECR DescribeImages of its tag), as
    given when it names a digest already; `unresolved` in $imageDigest when ECR does not answer (an image
    outside the stack's repository, or one deleted since)."""
    path = '$substringAfter($run.request.AlgorithmSpecification.TrainingImage, "/")'
    describe = tasks.CallAwsService.jsonata(
        scope,
        "ResolveImageDigest",
        service="ecr",
        action="describeImages",
        parameters={
            "RepositoryName": expression(f'$substringBefore({path}, ":")'),
            "ImageIds": [{"ImageTag": expression(f'$substringAfter({path}, ":")')}],
        },
        iam_resources=[repository_arn],
        assign={
            "imageDigest": expression("$states.result.ImageDetails[0].ImageDigest"),
            "imageUri": expression(
                '$substringBefore($run.request.AlgorithmSpecification.TrainingImage, ":" & '
                f'$substringAfter({path}, ":")) & "@" & $states.result.ImageDetails[0].ImageDigest'
            ),
        },
        outputs={},
    )
    retry_must_succeed_call(describe, [ECR_THROTTLED])
    describe.add_catch(then, errors=["States.ALL"], outputs={}, assign={"imageDigest": "unresolved"})
    describe.next(then)
    return (
        sfn.Choice.jsonata(scope, "ImageHasDigest")
        .when(sfn.Condition.jsonata(expression(f'$not($contains({path}, "@"))')), describe)
        .otherwise(then)
    )
