"""IAM of two teams of one deployment (config/examples/teams.yaml), second read (docs/teams.md, "The threat
model"): team research attacking team search with identities and requests its members or its machines could
make, simulated offline against the synthesized policies (@cloud-copilot/iam-simulate). As in
test_team_isolation.py, each denial is paired with the same request on research's own resources, which must
be allowed."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from stacks.pipeline.attempt_grants import create_job_conditions
from stacks.pipeline.state_machine_facts import substitution_names, with_values
from tests.iam.calls import Call
from tests.iam.deployed import Role
from tests.iam.simulator import simulate
from tests.iam.test_team_isolation import SECURE, TeamsDeployment, decisions, teams
from tests.pipeline.conftest import fake_value
from trainstack.pipeline_runs import runs_for

__all__ = ["teams"]  # the module fixture, shared with test_team_isolation.py


def image_repository_arn(teams: TeamsDeployment) -> str:
    """The deployment's one image repository, as the image stack names it."""
    [(stack, _, properties)] = teams.app.resources_of_type("AWS::ECR::Repository")
    name = teams.app.resolve(properties["RepositoryName"], stack)
    return f"arn:aws:ecr:{teams.region}:{teams.account}:repository/{name}"


def test_a_teams_registration_resolves_the_digest_of_the_shared_image(teams):
    """Bug: the grant named repository/trainstack-<team>-training, so every team's versions recorded
    `image.digest: unresolved` and a mutable tag."""
    repository = image_repository_arn(teams)
    calls = [
        Call(
            f"{team} describes the image",
            teams.role(team, "TrainingRegistrationStateMachineRole"),
            "ecr:DescribeImages",
            repository,
        )
        for team in ("research", "search")
    ]
    assert repository.endswith(":repository/trainstack-training")
    assert [caller for caller, ok in decisions(calls).items() if not ok] == []


# What a member may otherwise be allowed (a broad policy of their own, beside the team's start policy).
TAG_ANYTHING = {
    "name": "member-tags-anything",
    "policy": {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": ["sts:TagSession", "iam:TagRole", "iam:TagUser", "iam:UntagRole", "iam:UntagUser"],
                "Resource": "*",
            }
        ],
    },
}


def test_no_member_can_give_themselves_the_other_teams_tag(teams):
    """search is started by whoever carries trainstack-team=search (aws:PrincipalTag also reads session
    tags): a research member who could pass it at AssumeRole, or put it on their own role or user, would
    become search. Every team's start policy denies setting or removing the key, in any case; other tags
    stay the member's own business."""
    role = f"arn:aws:iam::{teams.account}:role/ml-research"
    user = f"arn:aws:iam::{teams.account}:user/someone"
    members = {
        "research": teams.principal("research", role),
        "search": teams.principal("search", f"arn:aws:iam::{teams.account}:role/someone"),
    }
    calls = []
    for team, member in members.items():
        member = replace(member, policies=[*member.policies, TAG_ANYTHING])
        for key in ("trainstack-team", "Trainstack-Team", "cost-center"):
            tags = {"aws:TagKeys": [key], f"aws:RequestTag/{key}": "search"}
            calls += [
                Call(f"{team} {key} session tag", member, "sts:TagSession", role, tags),
                Call(f"{team} {key} on its role", member, "iam:TagRole", role, tags),
                Call(f"{team} {key} on a user", member, "iam:TagUser", user, tags),
                Call(f"{team} {key} off its role", member, "iam:UntagRole", role, {"aws:TagKeys": [key]}),
                Call(f"{team} {key} off a user", member, "iam:UntagUser", user, {"aws:TagKeys": [key]}),
            ]
    allowed = decisions(calls)
    assert [caller for caller, ok in allowed.items() if ok] == [
        f"{team} cost-center {what}"
        for team in members
        for what in ("session tag", "on its role", "on a user", "off its role", "off a user")
    ]


def test_the_create_grant_of_a_direct_mode_team_matches_no_path_out_of_its_own_directories(teams_app):
    """Direct mode (in queue mode Batch creates the job, and SubmitServiceJob has no file system key): the
    CreateTrainingJob conditions research's attempt machine gets (attempt_grants.create_job_conditions)
    match `<own directory>/*`, which `<own directory>/../search` matched too."""
    settings, stacks, _ = teams_app
    stack = stacks.pipelines[0]
    # Its deploy-time values as the emulator's tests fill them (one fake per substitution), the file
    # system's mount name resolved in research's dataset directory (no profile is on the fsx store).
    values = {name: fake_value(name) for name in substitution_names(stack.resources)}
    values["FileSystemDirectoryPath"] = own = "/abcdefgh/dataset/research"
    resources = with_values(stack.resources, values)
    runs = runs_for(settings, "research")
    assert resources.job_name_prefix == "trainstack-research-"
    assert resources.file_system_directory_path == own
    job = f"arn:aws:sagemaker:{settings.region}:{settings.account}:training-job/trainstack-research-r1-1"
    statement = {
        "Effect": "Allow",
        "Action": "sagemaker:CreateTrainingJob",
        "Resource": job,
        "Condition": create_job_conditions(resources, runs.profiles, runs.limits),
    }
    machine = Role(
        "trainstack-research-pipeline",
        "AttemptStateMachineRole",
        f"arn:aws:iam::{settings.account}:role/research-attempt",
        "states.amazonaws.com",
        [{"name": "create", "policy": {"Version": "2012-10-17", "Statement": [statement]}}],
    )
    request = {
        "sagemaker:VpcSubnets": list(resources.subnet_ids),
        "sagemaker:VpcSecurityGroupIds": list(resources.security_group_ids),
        "sagemaker:InstanceTypes": ["ml.g5.12xlarge"],
        "sagemaker:MaxRuntimeInSeconds": "3600",
        "sagemaker:FileSystemId": resources.file_system_id,
    }
    paths = [own, f"{own}/", f"{own}/shard-a", f"{own}/../search", f"{own}/./x", f"{own}//x"]
    paths += [f"{own}/..", f"{own}/.", f"{own}/shard-a/../../search"]
    calls = [
        Call(
            path,
            machine,
            "sagemaker:CreateTrainingJob",
            job,
            {**request, "sagemaker:FileSystemDirectoryPath": path},
        )
        for path in paths
    ]
    assert [caller for caller, ok in decisions(calls).items() if ok] == paths[:3]


def topic_publishers(teams: TeamsDeployment, team: str) -> tuple[dict[str, Any], list[str]]:
    """The team's notification topic policy, and the ARNs of the team's rules that target the topic."""
    stack = f"trainstack-{team}-pipeline"
    [(_, _, properties)] = [e for e in teams.app.resources_of_type("AWS::SNS::TopicPolicy") if e[0] == stack]
    [topic] = teams.app.resolve(properties["Topics"], stack)
    rules = [
        teams.app.resolve({"Fn::GetAtt": [logical_id, "Arn"]}, stack)
        for rule_stack, logical_id, rule in teams.app.resources_of_type("AWS::Events::Rule")
        if rule_stack == stack
        and topic in [teams.app.resolve(target["Arn"], stack) for target in rule.get("Targets", [])]
    ]
    return {"topic": topic, "policy": teams.app.resolve(properties["PolicyDocument"], stack)}, rules


def test_only_the_teams_own_rules_publish_its_notifications(teams):
    """events.amazonaws.com may publish to research's topic for research's rules only (aws:SourceArn): any
    other rule of the account, search's included, could otherwise send research's notifications."""
    research, research_rules = topic_publishers(teams, "research")
    _, search_rules = topic_publishers(teams, "search")
    # The run's end, and the model versions' changes (research's profiles have a registry).
    assert len(research_rules) == 2 and len(search_rules) == 2
    events = Role("", "EventBridge", "events.amazonaws.com", "events.amazonaws.com")
    anyone = f"arn:aws:events:{teams.region}:{teams.account}:rule/someone-elses"
    calls = [
        Call(
            source,
            events,
            "sns:Publish",
            research["topic"],
            {"aws:SourceArn": source, "aws:SourceAccount": teams.account},
            resource_policy=research["policy"],
        )
        for source in [*research_rules, *search_rules, anyone]
    ]
    answers, _ = simulate(calls, account=teams.account)
    assert [answer.call.caller for answer in answers if answer.allowed] == research_rules


def test_a_teams_manifest_machine_lists_only_its_own_dataset_and_the_evaluation_sets(teams):
    """The registration's manifests list research's dataset prefix and the profiles' evaluation sets; the
    role of research's `dataset-manifest` machine may list no other prefix (search's, the whole bucket)."""
    lister = teams.role("research", "DatasetManifestListing")
    bucket = f"arn:aws:s3:::{teams.substitutions('research')['DatasetBucket']}"
    prefixes = {
        "datasets/research/": True,
        "evaluation/small/": True,
        "datasets/search/": False,
        "datasets/": False,
        "": False,
        None: False,
    }
    calls = [
        Call(
            repr(prefix),
            lister,
            "s3:ListBucket",
            bucket,
            {**SECURE, **({} if prefix is None else {"s3:prefix": prefix})},
        )
        for prefix in prefixes
    ]
    assert decisions(calls) == {repr(prefix): allowed for prefix, allowed in prefixes.items()}


def test_a_teams_machines_terminate_only_its_own_service_jobs_and_claim_only_its_own_run_names(teams):
    """The queue and its run-name table are shared: research's attempt, queue cleanup and sweeper machines
    may terminate no service job tagged with search's namespace, and its attempt machine claims only run
    names of research's."""
    service_job = f"arn:aws:batch:{teams.region}:{teams.account}:service-job/5c7b2a90"
    # The queue stack's run-name table (queue/run_names.py), shared by both teams.
    [(_, _, table)] = [
        entry
        for entry in teams.app.resources_of_type("AWS::DynamoDB::Table")
        if entry[0] == "trainstack-queue"
    ]
    names = f"arn:aws:dynamodb:{teams.region}:{teams.account}:table/{table['TableName']}"
    calls = []
    machines = ("TrainingAttemptStateMachineRole", "QueueCleanupRole", "QueueCleanupSweeperRole")
    for machine in machines:
        role = teams.role("research", machine)
        for owner in ("research", "search", None):
            tag = {} if owner is None else {"aws:ResourceTag/trainstack:namespace": f"trainstack-{owner}"}
            calls.append(
                Call(f"{machine} terminates {owner}'s", role, "batch:TerminateServiceJob", service_job, tag)
            )
    attempt = teams.role("research", "TrainingAttemptStateMachineRole")
    for owner in ("research", "search"):
        for action in ("dynamodb:PutItem", "dynamodb:GetItem"):
            keys = {"dynamodb:LeadingKeys": [f"trainstack-{owner}-nightly"]}
            calls.append(Call(f"{action} {owner}'s name", attempt, action, names, keys))
    allowed = decisions(calls)
    assert [caller for caller, ok in allowed.items() if ok] == [
        # An untagged job (queued by a release before 0.5.0 and in flight at the upgrade) stays terminable.
        *(f"{machine} terminates {owner}'s" for machine in machines for owner in ("research", None)),
        "dynamodb:PutItem research's name",
        "dynamodb:GetItem research's name",
    ]
