"""What `make synth CONFIG=config/examples/teams.yaml` deploys: a pipeline stack per team, each with its own
SageMaker role, FSx directory, model package groups and start policy, and one queue shared by fair share."""

from __future__ import annotations

from typing import Any

from tests.infra.templates import resources

TEAMS = ("research", "search")


def template_of(teams_app, name: str) -> dict[str, Any]:
    _, _, assembly = teams_app
    return assembly.get_stack_by_name(name).template


def test_each_team_has_a_pipeline_stack_and_they_share_one_queue(teams_app):
    _, stacks, _ = teams_app
    assert [stack.stack_name for stack in stacks.all] == [
        "trainstack-network",
        "trainstack-storage",
        "trainstack-image",
        "trainstack-queue",
        "trainstack-research-pipeline",
        "trainstack-search-pipeline",
    ]
    for team in TEAMS:
        template = template_of(teams_app, f"trainstack-{team}-pipeline")
        assert resources(template, "AWS::Batch::JobQueue") == {}
        names = {
            body["Properties"]["StateMachineName"]
            for body in resources(template, "AWS::StepFunctions::StateMachine").values()
        }
        assert f"trainstack-{team}-pipeline" in names and all(
            name.startswith(f"trainstack-{team}-") for name in names
        )
    [policy] = resources(template_of(teams_app, "trainstack-queue"), "AWS::Batch::SchedulingPolicy").values()
    shares = policy["Properties"]["FairsharePolicy"]["ShareDistribution"]
    assert shares == [
        {"ShareIdentifier": "research", "WeightFactor": 0.5},
        {"ShareIdentifier": "search", "WeightFactor": 1},
    ]


def test_each_teams_jobs_mount_only_the_teams_fsx_directories(teams_app):
    for team in TEAMS:
        template = template_of(teams_app, f"trainstack-{team}-pipeline")
        [pipeline] = [
            body["Properties"]
            for body in resources(template, "AWS::StepFunctions::StateMachine").values()
            if body["Properties"]["StateMachineName"] == f"trainstack-{team}-pipeline"
        ]
        substitutions = pipeline["DefinitionSubstitutions"]
        path = substitutions["FileSystemDirectoryPath"]
        # The dataset's association sits at / without the fsx store (stacks/storage/file_system_links.py).
        assert path["Fn::Join"][1][0] == "/" and path["Fn::Join"][1][-1] == f"/{team}", path
        # No profile checkpoints to the file system: no checkpoint directory to mount.
        assert "CheckpointDirectoryPath" not in substitutions


def test_each_team_has_its_own_model_package_group_per_profile(teams_app):
    groups = {
        team: sorted(
            body["Properties"]["ModelPackageGroupName"]
            for body in resources(
                template_of(teams_app, f"trainstack-{team}-pipeline"), "AWS::SageMaker::ModelPackageGroup"
            ).values()
        )
        for team in TEAMS
    }
    assert groups == {
        "research": ["trainstack-research-small-torchrun"],
        "search": ["trainstack-search-small-torchrun"],
    }


def test_the_start_policy_goes_to_the_teams_principals_or_requires_its_tag(teams_app):
    [research] = resources(
        template_of(teams_app, "trainstack-research-pipeline"), "AWS::IAM::ManagedPolicy"
    ).values()
    assert research["Properties"]["Roles"] == ["ml-research"]
    assert all(
        "Condition" not in statement for statement in research["Properties"]["PolicyDocument"]["Statement"]
    )
    [search] = resources(
        template_of(teams_app, "trainstack-search-pipeline"), "AWS::IAM::ManagedPolicy"
    ).values()
    assert "Roles" not in search["Properties"]
    assert {
        str(statement["Condition"]) for statement in search["Properties"]["PolicyDocument"]["Statement"]
    } == {str({"StringEquals": {"aws:PrincipalTag/trainstack-team": "search"}})}
