"""IAM of two teams of one deployment (config/examples/teams.yaml), second read (docs/teams.md, "The threat
model"): team research attacking team search with identities and requests its members or its machines could
make, simulated offline against the synthesized policies (@cloud-copilot/iam-simulate). As in
test_team_isolation.py, each denial is paired with the same request on research's own resources, which must
be allowed."""

from __future__ import annotations

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
