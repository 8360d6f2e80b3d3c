"""From run to approved model, on the virtual clock: the evaluation job, the gate in each mode, the first
version and the lineage a version carries (docs/registry.md). Its failures and retries:
test_evaluation_retries.py."""

from __future__ import annotations

import json

import boto3

from tests.domain.sagemaker_model import problems
from tests.pipeline import harness
from tests.pipeline.conftest import FAKE_VALUES, REGISTRY_GROUP, REGISTRY_PROFILE
from trainstack.manifest import prefix_manifest
from trainstack.registry import LINEAGE_KEYS, code_repository, code_version, config_hash, is_evaluation_job

PROFILE, GROUP = REGISTRY_PROFILE, REGISTRY_GROUP
DATASET_BUCKET = FAKE_VALUES["DatasetBucket"]  # conftest.deploy_registry_resources fills it


def versions() -> list[dict]:
    """Every version of the group, oldest first."""
    client = boto3.client("sagemaker")
    pages = client.get_paginator("list_model_packages").paginate(
        ModelPackageGroupName=GROUP, ModelPackageType="Versioned", SortBy="CreationTime"
    )
    return [
        client.describe_model_package(ModelPackageName=item["ModelPackageArn"])
        for page in pages
        for item in page["ModelPackageSummaryList"]
    ]


def test_auto_approves_the_first_version_then_a_better_one_and_rejects_a_worse_one_saying_why(
    registry, pipeline
):
    run = registry()
    first = run("trainstack-r1", 2.0)
    assert first.status == "SUCCEEDED", first.cause
    assert first.output["modelPackage"]["decision"] == "Approved"
    assert "first version" in first.output["modelPackage"]["reason"]
    assert_lineage(versions()[0], first, run.sm.fake.jobs["trainstack-r1-eval"].request, pipeline)
    better = run("trainstack-r2", 1.995)  # better than version 1: approved, and now the best
    assert better.status == "SUCCEEDED", better.cause
    assert better.output["modelPackage"]["decision"] == "Approved", better.output
    worse = run("trainstack-r3", 2.5)
    package = worse.output["modelPackage"]
    assert worse.status == "SUCCEEDED"
    assert package["decision"] == "Rejected"
    assert package["reason"] == (
        "rejected, worse than the best approved model: evaluation loss 2.5000 vs 1.9950 of Approved "
        "version 2, the best comparable (tolerance 0.01, absolute)"
    )
    described = versions()
    assert [v["ModelApprovalStatus"] for v in described] == ["Approved", "Approved", "Rejected"]
    assert_requests_match_the_service_model(run.sm.registration_arn)
    assert described[2]["ApprovalDescription"] == package["reason"]
    assert described[2]["ModelPackageArn"] == package["modelPackageArn"]


def test_manual_leaves_even_a_first_version_pending_whatever_first_version_says(registry):
    run = registry({r"\"approval\":\"auto\"": r"\"approval\":\"manual\""})  # first_version: Approved
    package = run("trainstack-m1", 1.0).output["modelPackage"]
    assert package["decision"] == "PendingManualApproval"
    assert package["reason"] == "approval: manual; evaluation loss 1.0000, no Approved version yet"
    assert [v["ModelApprovalStatus"] for v in versions()] == ["PendingManualApproval"]


def test_a_first_version_follows_first_version_and_then_has_no_baseline_to_beat(registry):
    run = registry({r"\"firstVersion\":\"Approved\"": r"\"firstVersion\":\"PendingManualApproval\""})
    outcome = run("trainstack-f1", 3.0)
    assert outcome.output["modelPackage"]["decision"] == "PendingManualApproval"
    assert outcome.output["modelPackage"]["baseline"] is None


def assert_lineage(version: dict, outcome, evaluation: dict, pipeline) -> None:
    """The version of run trainstack-r1 (evaluation loss 2.0) names where it came from; its evaluation job
    evaluated the run's model on the profile's evaluation set."""
    lineage = version["CustomerMetadataProperties"]
    s3 = boto3.client("s3")
    profile = pipeline.settings.profile(PROFILE)
    assert lineage == {
        LINEAGE_KEYS["run"]: "trainstack-r1",
        LINEAGE_KEYS["execution"]: outcome.execution_arn,
        LINEAGE_KEYS["jobs"]: "trainstack-r1-1",
        LINEAGE_KEYS["image"]: f"{pipeline.resources.image_uri.removesuffix(':v1')}@{image_digest()}",
        LINEAGE_KEYS["config"]: config_hash(profile),
        LINEAGE_KEYS["code"]: code_version(),  # the revision this synth's image is built from
        LINEAGE_KEYS["trainingSet"]: prefix_manifest(s3, DATASET_BUCKET, "datasets/").hash,
        LINEAGE_KEYS["evaluationSet"]: prefix_manifest(s3, DATASET_BUCKET, "evaluation/small/").hash,
        LINEAGE_KEYS["checkpoint"]: "s3://trainstack-checkpoints-test/trainstack-r1/",
        LINEAGE_KEYS["evaluationJob"]: "trainstack-r1-eval",
        LINEAGE_KEYS["maxEvalTokens"]: "1000000",
        LINEAGE_KEYS["seqLen"]: "1024",  # evaluate.py's default: the profile sets no seq_len
        LINEAGE_KEYS["loss"]: "2",
        LINEAGE_KEYS["perplexity"]: lineage[LINEAGE_KEYS["perplexity"]],
        LINEAGE_KEYS["tokens"]: "4096",
    }
    model = "s3://trainstack-artifacts-test/trainstack-r1/trainstack-r1-1/output/model/"
    container = version["InferenceSpecification"]["Containers"][0]
    assert container["Image"] == lineage[LINEAGE_KEYS["image"]]  # by digest, not by tag
    assert "@sha256:" in container["Image"]
    assert version["MetadataProperties"] == {
        "GeneratedBy": outcome.execution_arn,
        "CommitId": code_version(),
        "Repository": code_repository(),
    }
    assert container["ModelDataSource"]["S3DataSource"]["S3Uri"] == model
    statistics = version["ModelMetrics"]["ModelQuality"]["Statistics"]
    assert statistics["S3Uri"] == (
        "s3://trainstack-artifacts-test/trainstack-r1/trainstack-r1-eval/output/model/evaluation.json"
    )
    channels = {
        c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in evaluation["InputDataConfig"]
    }
    assert channels == {"model": model, "eval": "s3://trainstack-datasets-test/evaluation/small/"}
    # JSON-encoded, as the toolkit reads the job's program (trainstack.job_request writes "train.py" so)
    assert evaluation["HyperParameters"]["sagemaker_program"] == '"evaluate.py"'
    assert evaluation["HyperParameters"]["eval_manifest_hash"] == lineage[LINEAGE_KEYS["evaluationSet"]]
    assert "CheckpointConfig" not in evaluation
    assert evaluation["ResourceConfig"]["InstanceCount"] == 1


def image_digest() -> str:
    described = boto3.client("ecr").describe_images(
        repositoryName="trainstack-training", imageIds=[{"imageTag": "v1"}]
    )
    return described["imageDetails"][0]["imageDigest"]


# The evaluation job's CreateTrainingJob and DescribeTrainingJob come from its attempt execution.
REGISTRATION_OPERATIONS = {
    "CreateTrainingJob",
    "DescribeTrainingJob",
    "ListModelPackages",
    "DescribeModelPackage",
    "CreateModelPackage",
    "UpdateModelPackage",
}


def assert_requests_match_the_service_model(registration_arn: str, made=REGISTRATION_OPERATIONS) -> None:
    """Every SageMaker request the registration machine and its evaluation jobs' attempt executions made
    passes botocore's model: required members, types, lengths, patterns and enums
    (tests/domain/sagemaker_model.py); together they made at least `made`."""
    attempt_arn = registration_arn.replace("-pipeline-registration", "-pipeline-attempt")
    evaluations = [
        attempt
        for attempt in harness.executions(attempt_arn)
        if is_evaluation_job(attempt.state_inputs("CheckRequest")[0]["request"]["TrainingJobName"])
    ]
    calls = [
        event["taskScheduledEventDetails"]
        for execution in [*harness.executions(registration_arn), *evaluations]
        for event in execution.events("TaskScheduled")
        if event["taskScheduledEventDetails"]["resourceType"] == "aws-sdk:sagemaker"
    ]
    operations = set()
    for call in calls:
        operation = call["resource"][0].upper() + call["resource"][1:]
        operations.add(operation)
        assert problems(operation, json.loads(call["parameters"])) == [], operation
    assert operations >= made
