"""`trainstack models`, `approve` and `reject` against moto's Model Registry (with localaws's correction of
UpdateModelPackage, docs/registry.md)."""

from __future__ import annotations

import boto3
import pytest

from localaws.sagemaker import model_registry
from tests.aws_fixtures import ACCOUNT, REGION
from trainstack.cli import main

GROUP = "trainstack-small-torchrun"  # config/default.yaml's one profile with a registry: block
PIPELINE = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:trainstack-pipeline"


@pytest.fixture
def registry(aws, monkeypatch):
    model_registry.install(monkeypatch)
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    sagemaker.create_model_package_group(ModelPackageGroupName=GROUP)
    arns = []
    for run, loss, status in (("trainstack-a", "2.1", "Approved"), ("trainstack-b", "2.9", "Rejected")):
        arn = sagemaker.create_model_package(
            ModelPackageGroupName=GROUP,
            ModelApprovalStatus="PendingManualApproval",
            CustomerMetadataProperties={"run.name": run, "evaluation.loss": loss},
        )["ModelPackageArn"]
        sagemaker.update_model_package(
            ModelPackageArn=arn, ModelApprovalStatus=status, ApprovalDescription="gate"
        )
        arns.append(arn)
    return sagemaker, arns


def test_models_lists_each_version_with_its_loss_status_and_lineage(registry, capsys):
    assert main(["models", "--state-machine-arn", "unused"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split() == [f"{GROUP}", "v1", "Approved", "eval", "loss", "2.1", "gate"]
    assert "    run.name = trainstack-a" in printed
    assert any(line.split()[:3] == [GROUP, "v2", "Rejected"] for line in printed)


def test_approve_a_rejected_version_keeps_its_lineage_and_says_who_and_why(registry, capsys, monkeypatch):
    sagemaker, arns = registry
    monkeypatch.setattr("getpass.getuser", lambda: "ana")
    assert (
        main(["approve", "2", "--reason", "judged better on the holdout", "--state-machine-arn", PIPELINE])
        == 0
    )
    described = sagemaker.describe_model_package(ModelPackageName=arns[1])
    assert described["ModelApprovalStatus"] == "Approved"
    assert described["ApprovalDescription"] == "approved by ana: judged better on the holdout"
    assert described["CustomerMetadataProperties"]["run.name"] == "trainstack-b"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["reject", "v2", "--reason", "x"], "VERSION: 'v2' is neither a version number"),
        (["models", "--profile", "llama-7b-smp"], "--profile: 'llama-7b-smp' has no registry: block"),
    ],
)
def test_a_bad_version_or_profile_is_one_sentence_and_exit_2(registry, capsys, argv, message):
    assert main([*argv, "--state-machine-arn", "x"]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("partition", "region"), [("aws-cn", "cn-north-1"), ("aws-us-gov", "us-gov-west-1")])
def test_a_version_given_by_number_is_found_in_the_pipelines_partition(
    aws, monkeypatch, capsys, partition, region
):
    model_registry.install(monkeypatch)
    sagemaker = boto3.client("sagemaker", region_name=region)
    sagemaker.create_model_package_group(ModelPackageGroupName=GROUP)
    arn = sagemaker.create_model_package(
        ModelPackageGroupName=GROUP, ModelApprovalStatus="PendingManualApproval"
    )["ModelPackageArn"]
    assert arn.startswith(f"arn:{partition}:sagemaker:{region}:")
    pipeline = f"arn:{partition}:states:{region}:{ACCOUNT}:stateMachine:trainstack-pipeline"
    argv = ["reject", "1", "--reason", "worse", "--region", region, "--state-machine-arn", pipeline]
    assert main(argv) == 0
    assert capsys.readouterr().out.strip() == f"{arn} is now Rejected"
    assert sagemaker.describe_model_package(ModelPackageName=arn)["ModelApprovalStatus"] == "Rejected"


def test_a_state_machine_arn_that_is_no_arn_is_one_sentence_and_exit_2(registry, capsys):
    assert main(["approve", "1", "--reason", "fine", "--state-machine-arn", "trainstack-pipeline"]) == 2
    assert "--state-machine-arn: 'trainstack-pipeline' is not a Step Functions state machine ARN" in (
        capsys.readouterr().err
    )
