"""IAM of two teams of one deployment (config/examples/teams.yaml), second read (docs/teams.md, "The threat
model"): team research attacking team search with identities and requests its members or its machines could
make, simulated offline against the synthesized policies (@cloud-copilot/iam-simulate). As in
test_team_isolation.py, each denial is paired with the same request on research's own resources, which must
be allowed."""

from __future__ import annotations

from dataclasses import replace

from tests.iam.calls import Call
from tests.iam.test_team_isolation import TeamsDeployment, decisions, teams

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
