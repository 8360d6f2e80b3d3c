"""From run to approved model, on the virtual clock: the evaluation job, its failure, the gate in each
mode, the first version and the lineage a version carries (docs/registry.md)."""

from __future__ import annotations

import boto3
import pytest

from localaws.sagemaker import COMPLETED, STARTING, TRAINING, Phase, failed
from tests.pipeline import harness
from trainstack.registry import LINEAGE_KEYS, config_hash

PROFILE = "small-torchrun"  # config/default.yaml: approval auto, loss_tolerance 0.01, first_version Approved
GROUP = f"trainstack-{PROFILE}"
TRAINED = [STARTING, TRAINING, COMPLETED]


def evaluated(loss: float) -> list[Phase]:
    metrics = [
        {"MetricName": "evaluation:loss", "Value": loss},
        {"MetricName": "evaluation:perplexity", "Value": 2.718281828**loss},
        {"MetricName": "evaluation:tokens", "Value": 4096.0},
    ]
    return [TRAINING, Phase("Completed", "Completed", fields={"FinalMetricDataList": metrics})]


@pytest.fixture
def registry(interpreter, pipeline):
    """run(loss, mode edits) -> the run's Outcome: one run of PROFILE whose evaluation reports `loss`, with
    the registration machine's profile table edited by `table` (e.g. approval manual; the table is a JSON
    literal inside the definition's JSON, hence the escaped quotes)."""

    def start(table: dict[str, str] | None = None):
        sm = interpreter(job_scripts=[TRAINED])
        if table:
            definition = pipeline.registration_definition
            for old, new in table.items():
                assert old in definition
                definition = definition.replace(old, new)
            boto3.client("stepfunctions").update_state_machine(
                stateMachineArn=sm.registration_arn, definition=definition
            )
        boto3.client("sagemaker").create_model_package_group(ModelPackageGroupName=GROUP)  # the stack's

        def run(name: str, loss: float, script: list[Phase] | None = None):
            sm.fake.behaviour.script([TRAINED, script or evaluated(loss)])
            return sm.run({"profile": PROFILE, "runName": name, "hyperparameters": {}}, name=name)

        run.sm = sm
        return run

    return start


def versions() -> list[dict]:
    client = boto3.client("sagemaker")
    listed = client.list_model_packages(ModelPackageGroupName=GROUP, SortBy="CreationTime")
    return [
        client.describe_model_package(ModelPackageName=item["ModelPackageArn"])
        for item in listed["ModelPackageSummaryList"]
    ]


def test_auto_approves_the_first_version_then_a_better_one_and_rejects_a_worse_one_saying_why(registry):
    run = registry()
    first = run("trainstack-r1", 2.0)
    assert first.status == "SUCCEEDED", first.cause
    assert first.output["modelPackage"]["decision"] == "Approved"
    assert "first version" in first.output["modelPackage"]["reason"]
    better = run("trainstack-r2", 1.995)  # worse by less than the tolerance counts as no worse
    assert better.status == "SUCCEEDED", better.cause
    assert better.output["modelPackage"]["decision"] == "Approved", better.output
    worse = run("trainstack-r3", 2.5)
    package = worse.output["modelPackage"]
    assert worse.status == "SUCCEEDED"
    assert package["decision"] == "Rejected"
    assert package["reason"] == (
        "rejected, worse than the approved model: evaluation loss 2.5000 vs 1.9950 of Approved version 2 "
        "(tolerance 0.01)"
    )
    described = versions()
    assert [v["ModelApprovalStatus"] for v in described] == ["Approved", "Approved", "Rejected"]
    assert described[2]["ApprovalDescription"] == package["reason"]
    assert described[2]["ModelPackageArn"] == package["modelPackageArn"]


def test_manual_leaves_every_version_pending_with_the_comparison(registry):
    run = registry({r'\"approval\":\"auto\"': r'\"approval\":\"manual\"'})
    first, second = run("trainstack-m1", 2.0), run("trainstack-m2", 1.0)
    assert [first.output["modelPackage"]["decision"], second.output["modelPackage"]["decision"]] == [
        "PendingManualApproval",
        "PendingManualApproval",
    ]
    assert [v["ModelApprovalStatus"] for v in versions()] == ["PendingManualApproval"] * 2


def test_a_first_version_follows_first_version_and_then_has_no_baseline_to_beat(registry):
    run = registry({r'\"firstVersion\":\"Approved\"': r'\"firstVersion\":\"PendingManualApproval\"'})
    outcome = run("trainstack-f1", 3.0)
    assert outcome.output["modelPackage"]["decision"] == "PendingManualApproval"
    assert outcome.output["modelPackage"]["baseline"] is None
    # Still no Approved version: the next one is a first version too.
    assert run("trainstack-f2", 9.0).output["modelPackage"]["decision"] == "PendingManualApproval"


def test_a_failed_evaluation_ends_the_run_evaluation_failed_and_registers_nothing(registry):
    run = registry()
    outcome = run("trainstack-e1", 0, script=[TRAINING, failed("AlgorithmError: out of memory")])
    assert outcome.status == "FAILED"
    assert outcome.error == "EvaluationFailed"
    assert outcome.cause == (
        "Evaluation job trainstack-e1-eval ended Failed: AlgorithmError: out of memory. The model stays at "
        "s3://trainstack-artifacts-test/trainstack-e1/trainstack-e1-1/output/model/; it is not registered."
    )
    assert versions() == []


def test_the_version_carries_its_lineage_and_the_evaluation_job_evaluates_the_run_model(registry, pipeline):
    run = registry()
    outcome = run("trainstack-l1", 1.25)
    version = versions()[0]
    lineage = version["CustomerMetadataProperties"]
    profile = pipeline.settings.profile(PROFILE)
    assert lineage == {
        LINEAGE_KEYS["run"]: "trainstack-l1",
        LINEAGE_KEYS["execution"]: outcome.execution_arn,
        LINEAGE_KEYS["jobs"]: "trainstack-l1-1",
        LINEAGE_KEYS["image"]: pipeline.resources.image_uri,
        LINEAGE_KEYS["config"]: config_hash(profile),
        LINEAGE_KEYS["checkpoint"]: "s3://trainstack-checkpoints-test/trainstack-l1/",
        LINEAGE_KEYS["evaluationJob"]: "trainstack-l1-eval",
        LINEAGE_KEYS["loss"]: "1.25",
        LINEAGE_KEYS["perplexity"]: lineage[LINEAGE_KEYS["perplexity"]],
        LINEAGE_KEYS["tokens"]: "4096",
    }
    model = "s3://trainstack-artifacts-test/trainstack-l1/trainstack-l1-1/output/model/"
    container = version["InferenceSpecification"]["Containers"][0]
    assert container["ModelDataSource"]["S3DataSource"]["S3Uri"] == model
    statistics = version["ModelMetrics"]["ModelQuality"]["Statistics"]
    assert statistics["S3Uri"] == (
        "s3://trainstack-artifacts-test/trainstack-l1/trainstack-l1-eval/output/model/evaluation.json"
    )
    evaluation = run.sm.fake.jobs["trainstack-l1-eval"].request
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in evaluation["InputDataConfig"]}
    assert channels == {"model": model, "eval": "s3://trainstack-datasets-test/evaluation/small/"}
    assert evaluation["HyperParameters"]["sagemaker_program"] == "evaluate.py"
    assert "CheckpointConfig" not in evaluation
    assert evaluation["ResourceConfig"]["InstanceCount"] == 1
