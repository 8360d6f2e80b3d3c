"""Two teams whose profiles checkpoint on `s3-direct` (config/examples/teams.yaml with every profile on the
store): team research cannot resume from team search's checkpoints, which train.py would read itself
through s3torchconnector (no channel SageMaker fetches). The input rule `resumeFrom` "own-runs" refuses it
first; research's attempt machine started directly refuses a `resume_from` hyperparameter in search's
prefix (the request guard); and IAM denies research's SageMaker role s3torchconnector's calls on search's
checkpoint while allowing them on research's own. The pipeline's own resume of a research run reads it
directly and passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from localaws.sagemaker import COMPLETED, STARTING, TRAINING
from tests.checkpoint_store_modes import with_store
from tests.conftest import TEAMS_CONFIG, synthesize
from tests.iam.calls import Call
from tests.iam.deployed import DeployedApp
from tests.iam.test_team_isolation import SECURE, TeamsDeployment, decisions
from tests.pipeline import harness
from tests.pipeline.conftest import state_machine_arn
from tests.teams import test_team_isolation as isolation
from tests.teams.test_team_isolation import B_RUN, CHECKPOINTS, pipeline_of, research_request
from training_scripts.checkpoint_layout import MARKER, folder_name

# The two-team world of the isolation scenarios, on this module's app (teams_app below).
definitions, world = isolation.definitions, isolation.world
STEP = folder_name(100)
OWN_RUN = "trainstack-research-earlier"


@pytest.fixture(scope="module")
def teams_app(tmp_path_factory):
    """config/examples/teams.yaml with every profile on s3-direct: (settings, stacks, cloud assembly)."""
    import yaml

    from trainstack.config_loading import parse_settings

    data = with_store(yaml.safe_load(TEAMS_CONFIG.read_text()), "s3-direct")
    settings = parse_settings(data, {}, source="teams on s3-direct")
    stacks, assembly = synthesize(settings, tmp_path_factory.mktemp("teams-s3-direct.cdk.out"))
    return settings, stacks, assembly


def test_research_cannot_resume_from_searchs_s3_direct_checkpoints(world):
    for index, source in enumerate([f"s3://{CHECKPOINTS}/{B_RUN}/", f"s3://{CHECKPOINTS}/{B_RUN}/{STEP}/"]):
        outcome = harness.run(
            pipeline_of("research"), {"profile": "llama-7b-smp", "resumeFrom": source}, f"steal{index}"
        )
        assert (outcome.status, outcome.error) == ("FAILED", "InvalidInput"), outcome.cause
        assert outcome.cause.startswith("resumeFrom must lie in a run of trainstack-research:"), outcome.cause
    assert world.submitted_by("research") == []


def test_researchs_own_resume_is_read_directly(world):
    world.sagemaker.behaviour.script([[STARTING, TRAINING, COMPLETED]])
    source = f"s3://{CHECKPOINTS}/{OWN_RUN}/"
    outcome = harness.run(
        pipeline_of("research"),
        {"runName": "trainstack-research-r2", "profile": "llama-7b-smp", "resumeFrom": source},
        "r2",
    )
    assert outcome.status == "SUCCEEDED", outcome.cause
    [job] = world.sagemaker.created
    assert job["HyperParameters"]["resume_from"] == source
    assert job["HyperParameters"]["checkpoint_dir"] == f"s3://{CHECKPOINTS}/trainstack-research-r2/"
    assert "resume" not in {channel["ChannelName"] for channel in job["InputDataConfig"]}


def test_researchs_attempt_machine_refuses_a_resume_from_in_searchs_prefix(world, teams_app):
    def from_search(request):
        request["HyperParameters"]["resume_from"] = f"s3://{CHECKPOINTS}/{B_RUN}/"

    far = 10**13
    outcome = harness.run(
        state_machine_arn("trainstack-research-pipeline-attempt"),
        {
            "request": research_request(teams_app, from_search),
            "runName": "trainstack-research-direct",
            "stopAtMillis": far,
            "timeLimitSeconds": far,
            "throttles": 0,
            "share": "research",
        },
    )
    assert (outcome.status, outcome.error) == ("FAILED", "RequestRefused"), outcome.cause
    assert outcome.cause.startswith(
        f"HyperParameters.resume_from must lie under one of s3://{CHECKPOINTS}/trainstack-research-"
    ), outcome.cause
    assert world.submitted_by("research") == []


def test_iam_lets_researchs_role_read_directly_only_its_own_checkpoints(teams_app):
    """s3torchconnector's reads of a resume source (training_scripts/checkpoint_storage.py): list the run's
    prefix, HEAD and GET the marker (HeadObject is authorized as s3:GetObject), GET .metadata and a shard."""
    settings, _, assembly = teams_app
    teams = TeamsDeployment(
        DeployedApp(Path(assembly.directory), settings.account, settings.region),
        settings.account,
        settings.region,
    )
    research = teams.role("research", "SageMakerExecutionRole")
    bucket = teams.substitutions("research")["CheckpointBucket"]
    calls = []
    for owner, run in (("research", OWN_RUN), ("search", "trainstack-search-nightly")):
        calls.append(
            Call(
                f"{owner} list",
                research,
                "s3:ListBucket",
                f"arn:aws:s3:::{bucket}",
                {**SECURE, "s3:prefix": f"{run}/"},
            )
        )
        for name in (MARKER, ".metadata", "__0_0.distcp"):
            calls.append(
                Call(
                    f"{owner} get {name}",
                    research,
                    "s3:GetObject",
                    f"arn:aws:s3:::{bucket}/{run}/{STEP}/{name}",
                    SECURE,
                )
            )
    allowed = decisions(calls)
    assert [caller for caller, ok in allowed.items() if caller.startswith("search") and ok] == []
    assert [caller for caller, ok in allowed.items() if caller.startswith("research") and not ok] == []
