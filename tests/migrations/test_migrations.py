"""Config migrations of a live deployment (README, "Migrations"): each deploys the edited config over the one
before with no name conflict and no stateful resource replaced or removed, read by the deploy review
(trainstack.deploy_findings) from the synthesized templates, and keeps what holds the runs' data usable."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from localaws.emulator import VirtualClock
from localaws.emulator.jsonata_engine import jsonata_evaluator
from stacks.pipeline.pipeline_input_rules import check_input_expression, profile_table
from stacks.pipeline.request_guard import allowed_requests, request_problem
from tests.domain.conftest import S3_RESOURCES
from tests.migrations.conftest import REGISTRY_PROFILE, app_templates, settings_of
from trainstack.deploy_findings import findings
from trainstack.execution_input import InvalidInputError, validate_execution_input
from trainstack.job_request import RunRequest, build_create_training_job_request
from trainstack.pipeline_runs import all_pipeline_runs, pre_teams_stack_note, runs_for
from trainstack.queue_settings import queue_job_prefix, training_queue_name

App = dict[str, dict[str, Any]]
PIPELINE = "trainstack-pipeline"
GROUP = f"trainstack-{REGISTRY_PROFILE}"


def found(old: App, new: App) -> list[tuple[str, str | None]]:
    """(stack, short name) of each finding of deploying `new` over `old`."""
    return sorted(
        (finding.stack, finding.short_name if finding.logical_id else None) for finding in findings(old, new)
    )


def named(app: App, resource_type: str, name_property: str, name: str) -> dict[tuple[str, str], dict]:
    """Where the app holds the resource of that type and name: {(stack, logical id): resource}."""
    return {
        (stack, logical_id): resource
        for stack, template in app.items()
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == resource_type and resource["Properties"].get(name_property) == name
    }


def test_queue_mode_off_and_on_again_keeps_the_run_names_table():
    on, off = app_templates("single-queue"), app_templates("single-queue-off-kept")
    # Off: the queue cleanup goes, with its machines' execution logs; no run's data.
    assert found(on, off) == [(PIPELINE, "QueueCleanupCleanupLogs"), (PIPELINE, "QueueCleanupSweeperLogs")]
    assert found(off, on) == []
    # The claims of every queued run stay in the one table, at its place, while the queue is off.
    table = named(on, "AWS::DynamoDB::Table", "TableName", "trainstack-run-names")
    assert list(table) == [(PIPELINE, next(iter(table))[1])]
    assert named(off, "AWS::DynamoDB::Table", "TableName", "trainstack-run-names") == table
    assert next(iter(table.values()))["DeletionPolicy"] == "Retain"
    assert not any(r["Type"].startswith("AWS::Batch::") for r in off[PIPELINE]["Resources"].values())


def test_a_registry_profile_removed_and_added_again_keeps_its_group(single_app):
    removed = app_templates("registry-removed-kept")
    # Removed: the registration machine goes, with its execution logs and its leases (minutes long).
    assert found(single_app, removed) == [
        (PIPELINE, "DatasetManifestListingStateMachineLogs"),
        (PIPELINE, "TrainingRegistrationGroupLeases"),
        (PIPELINE, "TrainingRegistrationStateMachineLogs"),
    ]
    assert found(removed, single_app) == []
    group = named(single_app, "AWS::SageMaker::ModelPackageGroup", "ModelPackageGroupName", GROUP)
    assert named(removed, "AWS::SageMaker::ModelPackageGroup", "ModelPackageGroupName", GROUP) == group
    # Nothing registers into it meanwhile: no registration machine.
    assert not any(
        r["Properties"].get("StateMachineName") == f"{PIPELINE}-registration"
        for r in removed[PIPELINE]["Resources"].values()
    )


def test_the_trigger_and_the_built_image_off_and_on_again_keep_their_table_and_repository():
    on, off = app_templates("trigger"), app_templates("trigger-and-image-off-kept")
    # Off: the trigger machine goes, with its execution logs; the image copy function too, with its logs.
    (image_stack, copy_logs), trigger_logs = found(on, off)
    assert image_stack == "trainstack-image" and copy_logs.startswith("CustomCDKECRDeployment")
    assert trigger_logs == (PIPELINE, "RetrainTriggerStateMachineLogs")
    assert found(off, on) == []
    for resource_type, name_property, name in (
        ("AWS::DynamoDB::Table", "TableName", "trainstack-retrain-triggers"),
        ("AWS::ECR::Repository", "RepositoryName", "trainstack-training"),
    ):
        kept = named(on, resource_type, name_property, name)
        assert len(kept) == 1
        assert named(off, resource_type, name_property, name) == kept


def test_a_teams_trigger_off_and_on_again_keeps_its_table():
    on, off = app_templates("teams"), app_templates("teams-trigger-off-kept")
    search = "trainstack-search-pipeline"
    # Off: search's trigger machine goes, with its execution logs; research's pipeline is untouched.
    assert found(on, off) == [(search, "RetrainTriggerStateMachineLogs")]
    assert found(off, on) == []
    kept = named(on, "AWS::DynamoDB::Table", "TableName", "trainstack-search-retrain-triggers")
    assert list(kept) == [(search, next(iter(kept))[1])]
    assert named(off, "AWS::DynamoDB::Table", "TableName", "trainstack-search-retrain-triggers") == kept
    assert on["trainstack-research-pipeline"] == off["trainstack-research-pipeline"]


def test_control_tower_turns_object_lock_on_in_place(single_app):
    governed = app_templates("control-tower")
    # The one stateful change: the access-log bucket `none` created, retained once access_logs_bucket
    # replaces it (README); no bucket is replaced.
    assert found(single_app, governed) == [("trainstack-storage", "AccessLogBucket")]
    assert "retained outside the stack" in findings(single_app, governed)[0].sentence
    buckets = {
        logical_id: resource
        for logical_id, resource in governed["trainstack-storage"]["Resources"].items()
        if resource["Type"] == "AWS::S3::Bucket"
    }
    assert sorted(name[:-8] for name in buckets) == ["ArtifactBucket", "CheckpointBucket", "DatasetBucket"]
    for resource in buckets.values():
        assert "ObjectLockEnabled" not in resource["Properties"]
        assert resource["Properties"]["ObjectLockConfiguration"] == {"ObjectLockEnabled": "Enabled"}
        assert resource["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}


def test_one_team_becomes_teams_with_the_old_runs_and_versions():
    single, teams = app_templates("single-queue"), app_templates("teams-queue")
    # The pre-teams stack leaves the app and stays deployed (its runs finish there); the only finding.
    assert found(single, teams) == [(PIPELINE, None)]
    settings = settings_of("teams-queue")
    assert f"--stack-name {PIPELINE}" in pre_teams_stack_note(settings)
    # The teams' queue is named apart from the pre-teams one, and claims in its run-names table.
    queue = teams["trainstack-queue"]["Resources"]
    assert {r["Properties"].get("JobQueueName") for r in queue.values()} >= {"trainstack-teams-training"}
    assert not named(teams, "AWS::DynamoDB::Table", "TableName", "trainstack-run-names")
    research_pipeline = teams["trainstack-research-pipeline"]
    definitions = json.dumps(research_pipeline).replace("\\", "")  # the machines' JSON, unescaped
    assert queue_job_prefix(training_queue_name("trainstack-teams")) in definitions
    # research resumes a pre-teams run (the input rules, its requests and its SageMaker role allow it);
    # search does not, nor does research resume search's runs.
    research, search = all_pipeline_runs(settings)
    old_run = f"s3://ckpt/trainstack-{REGISTRY_PROFILE}-20261201/"
    assert _resume_problem(research, old_run) is None
    assert _resume_problem(search, old_run) is not None
    assert _resume_problem(research, "s3://ckpt/trainstack-search-r1/") is not None
    assert '"foreignRuns":["s3://${CheckpointBucket}/trainstack-search-"' in definitions
    effects = {
        statement.get("Sid"): statement["Effect"]
        for resource in research_pipeline["Resources"].values()
        if resource["Type"] == "AWS::IAM::Policy"
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]
    }
    assert (effects["ReadInheritedRuns"], effects["ReadOtherTeamsRuns"]) == ("Allow", "Deny")
    # Its registry baseline reads the pre-teams group's versions too.
    assert f'"inheritedGroup":"{GROUP}"' in definitions
    assert f"model-package/{GROUP}/*" in definitions


def _resume_problem(runs, uri: str) -> str | None:
    """The pipeline's input check (JSONata, as deployed, buckets filled in) and the CLI's agree on it."""
    expression = check_input_expression(runs)
    for name, bucket in (("CheckpointBucket", "ckpt"), ("ArtifactBucket", "artifacts")):
        expression = expression.replace("${" + name + "}", bucket)
    states = {"input": {"resumeFrom": uri}, "context": {"Execution": {"Name": "exec"}}}
    problem = jsonata_evaluator(VirtualClock())(
        expression, {"states": states, "profiles": profile_table(runs.profiles, S3_RESOURCES)}
    )["problem"]
    try:
        validate_execution_input({"resumeFrom": uri}, runs, "exec")
        cli = None
    except InvalidInputError as error:
        cli = str(error)
    assert (problem is None) == (cli is None), (problem, cli)
    return problem


def test_the_inheriting_teams_jobs_may_read_the_old_runs_and_no_other_teams():
    """The attempt machine's request check (its definition's) on the requests the pipeline builds."""
    research = runs_for(settings_of("teams-queue"), "research")
    resources = replace(
        S3_RESOURCES, job_name_prefix="trainstack-research-", dataset_prefix="datasets/research/"
    )
    allowed, profile = allowed_requests(research, resources), research.profile(REGISTRY_PROFILE)
    evaluate = jsonata_evaluator(VirtualClock())

    def problem(resume_from: str) -> str | None:
        run = RunRequest(profile=profile.name, run_name="trainstack-research-r1", resume_from=resume_from)
        request = build_create_training_job_request(profile, resources, run, 1, "arn:x")
        return evaluate(request_problem(allowed, "$request"), {"request": request})

    assert problem(f"s3://{resources.checkpoint_bucket}/trainstack-{REGISTRY_PROFILE}-1/") is None
    assert problem(f"s3://{resources.artifact_bucket}/trainstack-research-r0/") is None
    assert problem(f"s3://{resources.checkpoint_bucket}/trainstack-search-r1/") == (
        "InputDataConfig and HyperParameters.resume_from must not lie under another team's runs: "
        f"s3://{resources.checkpoint_bucket}/trainstack-search-, s3://{resources.artifact_bucket}/trainstack-search-."
    )
