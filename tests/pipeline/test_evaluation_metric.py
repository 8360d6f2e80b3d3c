"""A profile's own evaluation metric (docs/registry.md, "Your own metric"): the gate compares the metric the
profile names, in its direction and within its tolerance, with the best comparable Approved version, and
records it in the version's metadata, where the next registration reads it back. On the synthesized
registration machine, in the emulator, on the virtual clock; existing profiles keep loss, minimize."""

from __future__ import annotations

import boto3

from localaws.sagemaker import evaluated
from stacks.pipeline.registry.evaluation_request import registry_table
from tests.pipeline.conftest import REGISTRY_GROUP
from tests.queue.test_queue_config import config_error, settings_with, with_profile_field
from trainstack.job_request import PipelineResources

# The synthesized table of config/default.yaml's small-torchrun (loss, minimize, loss_tolerance 0.01), as
# the definition holds it (a JSON literal inside the definition's JSON), and the same profile with
# `evaluation: {metric: {name: accuracy, goal: maximize, tolerance: 0.01}}`.
LOSS_TABLE = r"\"metric\":\"loss\",\"goal\":\"minimize\",\"tolerance\":0.01"
ACCURACY_TABLE = r"\"metric\":\"accuracy\",\"goal\":\"maximize\",\"tolerance\":0.01"
ACCURACY = {"metric": {"name": "accuracy", "goal": "maximize", "tolerance": 0.01}}


def decisions(*outcomes) -> list[str]:
    return [outcome.output["modelPackage"]["decision"] for outcome in outcomes]


def metadata(version: int) -> dict[str, str]:
    [package] = [
        p
        for p in boto3.client("sagemaker").list_model_packages(ModelPackageGroupName=REGISTRY_GROUP)[
            "ModelPackageSummaryList"
        ]
        if p["ModelPackageVersion"] == version
    ]
    described = boto3.client("sagemaker").describe_model_package(ModelPackageName=package["ModelPackageArn"])
    return described["CustomerMetadataProperties"]


def test_a_maximize_metric_approves_a_better_version_and_rejects_a_worse_one_beyond_tolerance(registry):
    run = registry({LOSS_TABLE: ACCURACY_TABLE})
    # The loss gets worse as accuracy gets better: the gate must read accuracy, higher is better.
    first = run("trainstack-a1", 2.0, evaluated(2.0, accuracy=0.80))
    better = run("trainstack-a2", 2.5, evaluated(2.5, accuracy=0.85))
    within = run("trainstack-a3", 3.0, evaluated(3.0, accuracy=0.845))
    worse = run("trainstack-a4", 1.0, evaluated(1.0, accuracy=0.83))
    assert decisions(first, better, within, worse) == ["Approved", "Approved", "Approved", "Rejected"]
    assert worse.output["modelPackage"]["baseline"]["version"] == 2
    assert worse.output["modelPackage"]["reason"] == (
        "rejected, worse than the best approved model: evaluation accuracy 0.8300 vs 0.8500 of Approved "
        "version 2, the best comparable (tolerance 0.01, absolute)"
    )
    # The metric is in the version's metadata as the gate compared it, and reads back as the baseline.
    assert metadata(2)["evaluation.accuracy"] == "0.85"
    assert metadata(2)["evaluation.loss"] == "2.5"


def test_an_evaluation_that_does_not_report_the_profiles_metric_fails_naming_it(registry):
    run = registry({LOSS_TABLE: ACCURACY_TABLE})
    outcome = run("trainstack-n1", 2.0)  # loss only
    assert (outcome.status, outcome.error) == ("FAILED", "EvaluationFailed")
    assert "completed but reported no evaluation:accuracy metric." in outcome.cause


def test_a_profile_names_its_metric_and_evaluation_script_and_keeps_loss_otherwise(pipeline):
    resources: PipelineResources = pipeline.resources
    profiles = {p.name: p for p in settings_with({}).profiles}
    default = registry_table("trainstack", [profiles["small-torchrun"]], resources)["small-torchrun"]
    assert (default["metric"], default["goal"], default["tolerance"], default["program"]) == (
        "loss",
        "minimize",
        0.01,
        '"evaluate.py"',
    )
    index = [p.name for p in settings_with({}).profiles].index("small-torchrun")
    own = settings_with(
        {
            "profiles": with_profile_field(
                index,
                registry={"evaluation_prefix": "evaluation/small/", "approval": "auto"},
                evaluation={**ACCURACY, "entry_point": "eval/classify.py"},
            )
        }
    )
    table = registry_table("trainstack", [own.profile("small-torchrun")], resources)["small-torchrun"]
    assert (table["metric"], table["goal"], table["tolerance"], table["program"]) == (
        "accuracy",
        "maximize",
        0.01,
        '"eval/classify.py"',
    )
    assert table["ownEntryPoint"] is True and default["ownEntryPoint"] is False
    # A team's evaluate.py is the team's, not the image's of the same name: the run's code goes with it.
    named_alike = settings_with(
        {
            "profiles": with_profile_field(
                index,
                registry={"evaluation_prefix": "evaluation/small/"},
                evaluation={**ACCURACY, "entry_point": "evaluate.py"},
            )
        }
    ).profile("small-torchrun")
    assert registry_table("trainstack", [named_alike], resources)["small-torchrun"]["ownEntryPoint"] is True
    assert table["metricDefinitions"][-1] == {
        "Name": "evaluation:accuracy",
        "Regex": table["metricDefinitions"][0]["Regex"].replace("eval_loss", "eval_accuracy"),
    }


def test_evaluation_settings_are_refused_in_one_sentence_naming_the_field():
    index = [p.name for p in settings_with({}).profiles].index("small-torchrun")
    assert "profiles.0.evaluation: only a profile with a registry: block evaluates its runs" in config_error(
        {"profiles": with_profile_field(0, evaluation=ACCURACY)}
    )
    assert (
        f"profiles.{index}.registry.loss_tolerance: the gate compares evaluation.metric (accuracy) within "
        "evaluation.metric.tolerance; remove loss_tolerance"
    ) in config_error({"profiles": with_profile_field(index, evaluation=ACCURACY)})
    assert "entry_point" in config_error(
        {
            "profiles": with_profile_field(
                index,
                registry={"evaluation_prefix": "evaluation/small/"},
                evaluation={"entry_point": "../other/evaluate.py"},
            )
        }
    )
