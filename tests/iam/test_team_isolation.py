"""IAM keeps two teams of one deployment apart (config/examples/teams.yaml; docs/teams.md): the requests one
team's identities could make against the other team's data and machines, simulated offline against the
synthesized policies (@cloud-copilot/iam-simulate). Each denial is paired with the same request on the
team's own resources, which must be allowed, so a policy that allows nothing fails too."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.iam.calls import Call
from tests.iam.deployed import DeployedApp, Role
from tests.iam.simulator import simulate

SECURE = {"aws:SecureTransport": "true"}


@dataclass(frozen=True)
class TeamsDeployment:
    app: DeployedApp
    account: str
    region: str

    def substitutions(self, team: str) -> dict[str, Any]:
        """The deployed values team's pipeline definition names (its role, buckets, FSx directory)."""
        [(stack, _, properties)] = [
            entry
            for entry in self.app.resources_of_type("AWS::StepFunctions::StateMachine")
            if entry[2].get("StateMachineName") == f"trainstack-{team}-pipeline"
        ]
        return {
            name: self.app.resolve(value, stack)
            for name, value in properties["DefinitionSubstitutions"].items()
        }

    def role(self, team: str, logical_prefix: str) -> Role:
        [role] = [
            role
            for role in self.app.roles.values()
            if role.stack == f"trainstack-{team}-pipeline" and role.logical_id.startswith(logical_prefix)
        ]
        return role

    def machine_arn(self, name: str) -> str:
        return f"arn:aws:states:{self.region}:{self.account}:stateMachine:{name}"

    def principal(self, team: str, arn: str) -> Role:
        """An identity holding the team's start policy, as the platform team attaches it."""
        stack = f"trainstack-{team}-pipeline"
        [(_, logical_id, properties)] = [
            entry for entry in self.app.resources_of_type("AWS::IAM::ManagedPolicy") if entry[0] == stack
        ]
        document = self.app.resolve(properties["PolicyDocument"], stack)
        return Role(
            stack, logical_id, arn, "", [{"name": properties["ManagedPolicyName"], "policy": document}]
        )


@pytest.fixture(scope="module")
def teams(teams_app) -> TeamsDeployment:
    settings, _, assembly = teams_app
    app = DeployedApp(Path(assembly.directory), settings.account, settings.region)
    return TeamsDeployment(app, settings.account, settings.region)


def decisions(calls: list[Call]) -> dict[str, bool]:
    answers, _ = simulate(calls)
    return {answer.call.caller: answer.allowed for answer in answers}


def test_a_teams_sagemaker_role_reaches_only_its_own_run_and_dataset_prefixes(teams):
    research = teams.role("research", "SageMakerExecutionRole")
    values = teams.substitutions("research")
    checkpoints, artifacts, dataset = (
        values["CheckpointBucket"],
        values["ArtifactBucket"],
        values["DatasetBucket"],
    )
    calls = []
    for owner in ("research", "search"):
        run = f"trainstack-{owner}-r1"
        for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
            for bucket in (checkpoints, artifacts):
                calls.append(
                    Call(
                        f"{owner} {action} {bucket}",
                        research,
                        action,
                        f"arn:aws:s3:::{bucket}/{run}/x",
                        SECURE,
                    )
                )
        calls.append(
            Call(
                f"{owner} list checkpoints",
                research,
                "s3:ListBucket",
                f"arn:aws:s3:::{checkpoints}",
                {**SECURE, "s3:prefix": f"{run}/"},
            )
        )
        calls.append(
            Call(
                f"{owner} read dataset",
                research,
                "s3:GetObject",
                f"arn:aws:s3:::{dataset}/datasets/{owner}/train-000.bin",
                SECURE,
            )
        )
    allowed = decisions(calls)
    assert [caller for caller, ok in allowed.items() if caller.startswith("search") and ok] == []
    assert [caller for caller, ok in allowed.items() if caller.startswith("research") and not ok] == []


def test_a_teams_sagemaker_role_opens_sessions_only_on_its_own_directory_bucket(teams):
    """s3-express: a CreateSession session authorizes every object call in the bucket (no prefix ARN), so each
    team has a directory bucket and only its own SageMaker role may open a session on it."""
    buckets = {team: teams.substitutions(team)["ExpressCheckpointBucket"] for team in ("research", "search")}
    assert buckets["research"] != buckets["search"] and all(
        b.endswith("--use1-az4--x-s3") for b in buckets.values()
    )
    calls = [
        Call(
            f"{caller} {mode} on {owner}'s",
            teams.role(caller, "SageMakerExecutionRole"),
            "s3express:CreateSession",
            f"arn:aws:s3express:{teams.region}:{teams.account}:bucket/{buckets[owner]}",
            {**SECURE, "s3express:SessionMode": mode},
        )
        for caller in ("research", "search")
        for owner in ("research", "search")
        for mode in ("ReadWrite", "ReadOnly")
    ]
    allowed = decisions(calls)
    assert sorted(caller for caller, ok in allowed.items() if ok) == [
        "research ReadOnly on research's",
        "research ReadWrite on research's",
        "search ReadOnly on search's",
        "search ReadWrite on search's",
    ]


def test_a_teams_principals_start_only_the_teams_own_pipeline(teams):
    research = teams.principal("research", f"arn:aws:iam::{teams.account}:role/ml-research")
    tagged = teams.principal("search", f"arn:aws:iam::{teams.account}:role/someone")
    own_tag = {"aws:PrincipalTag/trainstack-team": "search"}
    calls = [
        Call(
            "research starts its pipeline",
            research,
            "states:StartExecution",
            teams.machine_arn("trainstack-research-pipeline"),
        ),
        Call(
            "research starts search's",
            research,
            "states:StartExecution",
            teams.machine_arn("trainstack-search-pipeline"),
        ),
        Call(
            "search (tagged) starts its pipeline",
            tagged,
            "states:StartExecution",
            teams.machine_arn("trainstack-search-pipeline"),
            own_tag,
        ),
        Call(
            "search untagged starts its pipeline",
            tagged,
            "states:StartExecution",
            teams.machine_arn("trainstack-search-pipeline"),
            {"aws:PrincipalTag/trainstack-team": "research"},
        ),
        Call(
            "search (tagged) starts research's",
            tagged,
            "states:StartExecution",
            teams.machine_arn("trainstack-research-pipeline"),
            own_tag,
        ),
    ]
    for machine in ("pipeline-attempt", "pipeline-registration", "job-cleanup", "queue-cleanup"):
        for team in ("research", "search"):
            calls.append(
                Call(
                    f"research starts inner {team}-{machine}",
                    research,
                    "states:StartExecution",
                    teams.machine_arn(f"trainstack-{team}-{machine}"),
                )
            )
    stop_search = (
        f"arn:aws:states:{teams.region}:{teams.account}:execution:trainstack-search-pipeline:nightly"
    )
    calls.append(Call("research stops search's run", research, "states:StopExecution", stop_search))
    approve_search = (
        f"arn:aws:sagemaker:{teams.region}:{teams.account}:model-package/trainstack-search-small-torchrun/1"
    )
    approve_own = approve_search.replace("trainstack-search-", "trainstack-research-")
    calls.append(
        Call("research approves search's version", research, "sagemaker:UpdateModelPackage", approve_search)
    )
    calls.append(
        Call("research approves its own version", research, "sagemaker:UpdateModelPackage", approve_own)
    )
    allowed = decisions(calls)
    assert [caller for caller, ok in allowed.items() if ok] == [
        "research starts its pipeline",
        "search (tagged) starts its pipeline",
        "research approves its own version",
    ]


def test_a_teams_machines_create_and_submit_only_as_the_team(teams):
    """research's registration machine creates no job itself (its evaluation jobs are its attempt machine's);
    its attempt machine submits only to research's share, within its priority cap, passing its own role."""
    values = teams.substitutions("research")
    other = teams.substitutions("search")
    registration = teams.role("research", "TrainingRegistrationStateMachineRole")
    attempt = teams.role("research", "TrainingAttemptStateMachineRole")
    job = f"arn:aws:sagemaker:{teams.region}:{teams.account}:training-job"

    def create(directory: str) -> dict[str, Any]:
        return {
            "sagemaker:VpcSubnets": [values["TrainingSubnet0"]],
            "sagemaker:VpcSecurityGroupIds": [values["TrainingSecurityGroup0"]],
            "sagemaker:InstanceTypes": ["ml.g5.12xlarge"],
            "sagemaker:MaxRuntimeInSeconds": "3600",
            "sagemaker:FileSystemId": values["FileSystemId"],
            "sagemaker:FileSystemDirectoryPath": directory,
        }

    own_dir, other_dir = values["FileSystemDirectoryPath"], other["FileSystemDirectoryPath"]
    service_job = f"arn:aws:batch:{teams.region}:{teams.account}:service-job/x"
    passed = {"iam:PassedToService": "sagemaker.amazonaws.com"}
    calls = [
        # Its evaluation jobs run in its attempt machine (docs/registry.md), submitted like its attempts.
        Call(
            "registration creates a job itself",
            registration,
            "sagemaker:CreateTrainingJob",
            f"{job}/trainstack-research-r-eval",
            create(own_dir),
        ),
        Call("pass its own role", attempt, "iam:PassRole", values["SageMakerRoleArn"], passed),
        Call("pass search's role", attempt, "iam:PassRole", other["SageMakerRoleArn"], passed),
        Call(
            "submit in its share",
            attempt,
            "batch:SubmitServiceJob",
            service_job,
            {"batch:ShareIdentifier": "research", "batch:SchedulingPriority": "100"},
        ),
        Call(
            "submit in search's share",
            attempt,
            "batch:SubmitServiceJob",
            service_job,
            {"batch:ShareIdentifier": "search", "batch:SchedulingPriority": "0"},
        ),
        Call(
            "submit above its priority cap",
            attempt,
            "batch:SubmitServiceJob",
            service_job,
            {"batch:ShareIdentifier": "research", "batch:SchedulingPriority": "101"},
        ),
    ]
    assert own_dir != other_dir and values["SageMakerRoleArn"] != other["SageMakerRoleArn"]
    allowed = decisions(calls)
    assert [caller for caller, ok in allowed.items() if ok] == [
        "pass its own role",
        "submit in its share",
    ]


def test_a_teams_code_is_read_by_its_jobs_written_by_its_principals_and_by_no_other_team(teams):
    """trainstack start --code uploads to s3://<artifacts>/code/<namespace>/<sha256>/ (trainstack.team_code):
    the team's jobs read it and cannot rewrite it behind its digest; the other team reaches none of it."""
    artifacts = teams.substitutions("research")["ArtifactBucket"]
    research_jobs = teams.role("research", "SageMakerExecutionRole")
    research = teams.principal("research", f"arn:aws:iam::{teams.account}:role/ml-research")

    def bundle(owner: str) -> str:
        return f"arn:aws:s3:::{artifacts}/code/trainstack-{owner}/{'0' * 64}/sourcedir.tar.gz"

    calls = [
        Call("jobs read own code", research_jobs, "s3:GetObject", bundle("research"), SECURE),
        Call("jobs read search's code", research_jobs, "s3:GetObject", bundle("search"), SECURE),
        Call("jobs rewrite own code", research_jobs, "s3:PutObject", bundle("research"), SECURE),
        Call("principal uploads own code", research, "s3:PutObject", bundle("research"), SECURE),
        Call("principal uploads to search's code", research, "s3:PutObject", bundle("search"), SECURE),
        Call("principal reads search's code", research, "s3:GetObject", bundle("search"), SECURE),
    ]
    assert decisions(calls) == {
        "jobs read own code": True,
        "jobs read search's code": False,
        "jobs rewrite own code": False,
        "principal uploads own code": True,
        "principal uploads to search's code": False,
        "principal reads search's code": False,
    }
