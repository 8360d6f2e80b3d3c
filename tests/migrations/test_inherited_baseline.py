"""From one team to teams, in the emulator: the team that inherits the single team's runs registers against
the model versions registered before teams (docs/teams.md, "Migrations"). Team research's pipeline is its
stack's synthesized definitions; the pre-teams group `trainstack-small-torchrun` holds version 1, Approved,
with the lineage a registration records (its evaluation loss and the facts a baseline is compared on)."""

from __future__ import annotations

import boto3
import pytest

from localaws.sagemaker import COMPLETED, STARTING, TRAINING, evaluated, scripted_sagemaker
from tests.migrations.conftest import REGISTRY_PROFILE, app_templates, settings_of
from tests.pipeline import harness
from tests.pipeline.conftest import (
    FAKE_VALUES,
    deploy_registry_resources,
    filled_definition,
    state_machines,
)
from training_scripts.metrics import EVALUATION_DEFAULT_SEQ_LEN
from trainstack.manifest import prefix_manifest
from trainstack.registry import LINEAGE_KEYS, group_name

OLD_GROUP = f"trainstack-{REGISTRY_PROFILE}"
PIPELINE = "trainstack-research-pipeline"


@pytest.fixture(scope="module")
def definitions() -> dict[str, str]:
    """Team research's state machines (teams without queue mode, research inheriting), by name, filled with
    the fake deploy-time values."""
    template = app_templates("teams")[PIPELINE]
    return {name: filled_definition(props, template) for name, props in state_machines(template).items()}


def register_before_teams(loss: float) -> str:
    """Version 1 of the pre-teams group, Approved, recorded as the pre-teams registration recorded it."""
    registry = settings_of("teams").profile(REGISTRY_PROFILE).registry
    s3, bucket = boto3.client("s3"), FAKE_VALUES["DatasetBucket"]
    evaluation_set = prefix_manifest(s3, bucket, registry.evaluation_prefix)
    sagemaker = boto3.client("sagemaker")
    sagemaker.create_model_package_group(ModelPackageGroupName=OLD_GROUP)
    return sagemaker.create_model_package(
        ModelPackageGroupName=OLD_GROUP,
        ModelApprovalStatus="Approved",
        CustomerMetadataProperties={
            LINEAGE_KEYS["loss"]: str(loss),
            LINEAGE_KEYS["evaluationSet"]: evaluation_set.hash,
            LINEAGE_KEYS["maxEvalTokens"]: str(registry.max_eval_tokens),
            LINEAGE_KEYS["seqLen"]: str(EVALUATION_DEFAULT_SEQ_LEN),
        },
    )["ModelPackageArn"]


def test_the_inheriting_team_decides_against_the_versions_registered_before_teams(definitions, monkeypatch):
    fake = scripted_sagemaker(job_scripts=[[STARTING, TRAINING, COMPLETED]])
    with harness.pipeline_environment(fake, monkeypatch):
        deploy_registry_resources(settings_of("teams"))  # the teams' groups, the image, the evaluation set
        before_teams = register_before_teams(2.0)
        arns = {name: harness.create_state_machine(text, name) for name, text in definitions.items()}
        fake.behaviour.script_evaluations(evaluated(2.5))
        outcome = harness.run(
            arns[PIPELINE], {"profile": REGISTRY_PROFILE, "runName": "trainstack-research-r1"}, "r1"
        )
    assert outcome.status == "SUCCEEDED", (outcome.error, outcome.cause)
    package = outcome.output["modelPackage"]
    # Worse than the pre-teams version: rejected against it, not approved as its own group's first version.
    assert package["decision"] == "Rejected", package
    assert package["baseline"]["arn"] == before_teams
    assert f"/{group_name('trainstack-research', REGISTRY_PROFILE)}/" in package["modelPackageArn"]
