"""Two teams of one deployment (config/examples/teams.yaml), second read, in the emulator: team research's
attempt machine, started directly with a request of research's own making, cannot reach team search's
directories through a location that is not normalized (`<own directory>/../search`, `.`, `//`): each is
refused (RequestRefused) before any job, while the same request at research's own directory is submitted.

Both teams' pipelines are the synthesized definitions of their own stacks, as in test_team_isolation.py.
"""

from __future__ import annotations

from typing import Any

from localaws.sagemaker import COMPLETED, STARTING, TRAINING
from tests.pipeline import harness
from tests.pipeline.conftest import FAKE_VALUES, state_machine_arn
from tests.teams import test_team_isolation as isolation
from tests.teams.test_team_isolation import (
    B_RUN,
    CHECKPOINTS,
    checkpoint_directory,
    pipeline_of,
    research_request,
)

# The two-team world of the isolation scenarios (its module fixtures, on the session's teams app).
definitions, world = isolation.definitions, isolation.world
FAR = 10**13


def start_attempt(request: dict[str, Any], name: str) -> harness.Outcome:
    """research's attempt machine, started directly as someone granted StartExecution on it would."""
    return harness.run(
        state_machine_arn("trainstack-research-pipeline-attempt"),
        {
            "request": request,
            "runName": "trainstack-research-direct",
            "stopAtMillis": FAR,
            "timeLimitSeconds": FAR,
            "throttles": 0,
            "share": "research",
        },
        name,
    )


def with_checkpoint_channel(request: dict[str, Any], directory: str) -> dict[str, Any]:
    """The fsx store's rw channel at `directory`."""
    source = {
        "FileSystemId": FAKE_VALUES["FileSystemId"],
        "FileSystemType": "FSxLustre",
        "DirectoryPath": directory,
        "FileSystemAccessMode": "rw",
    }
    channel = {
        "ChannelName": "checkpoints",
        "DataSource": {"FileSystemDataSource": source},
        "InputMode": "File",
    }
    request["InputDataConfig"].append(channel)
    return request


def at_dataset_directory(path: str):
    def edit(request: dict[str, Any]) -> None:
        for channel in request["InputDataConfig"]:
            if "FileSystemDataSource" in channel["DataSource"]:
                channel["DataSource"]["FileSystemDataSource"]["DirectoryPath"] = path

    return edit


def at_checkpoint_uri(uri: str):
    def edit(request: dict[str, Any]) -> None:
        request["CheckpointConfig"]["S3Uri"] = uri

    return edit


def test_a_location_that_is_not_normalized_is_refused_before_any_job(world, teams_app):
    dataset = research_dataset_directory(teams_app)
    train = "InputDataConfig (channel train)"
    # (the field the cause names, the location, the edit of research's own request)
    attacks = [
        (train, path, at_dataset_directory(path))
        for path in (
            f"{dataset}/../search",
            f"{dataset}/./x",
            f"{dataset}//x",
            f"{dataset}/..",
            f"{dataset}/.",
        )
    ]
    # A checkpoint channel on the file system (the fsx store's) is refused the same way, first.
    own = checkpoint_directory("research")
    attacks.append(
        (
            "InputDataConfig (channel checkpoints)",
            f"{own}/../search",
            lambda request: with_checkpoint_channel(request, f"{own}/../search"),
        )
    )
    s3_attack = f"s3://{CHECKPOINTS}/trainstack-research-direct/../{B_RUN}/"
    attacks.append(("CheckpointConfig.S3Uri", s3_attack, at_checkpoint_uri(s3_attack)))
    for index, (field, path, edit) in enumerate(attacks):
        outcome = start_attempt(research_request(teams_app, edit), f"dots-{index}")
        assert (outcome.status, outcome.error) == ("FAILED", "RequestRefused"), (path, outcome.cause)
        assert outcome.cause == (
            f"{field} must be a normalized location, with no . or .. segment and no //; it is {path}."
        )
    assert world.submitted_by("research") == []


def research_dataset_directory(teams_app) -> str:
    [directory] = [
        channel["DataSource"]["FileSystemDataSource"]["DirectoryPath"]
        for channel in research_request(teams_app)["InputDataConfig"]
        if "FileSystemDataSource" in channel["DataSource"]
    ]
    return directory


def test_the_same_request_below_the_teams_own_directory_is_submitted(world, teams_app):
    world.sagemaker.behaviour.script([[STARTING, TRAINING, COMPLETED]])
    below = f"{research_dataset_directory(teams_app)}/shard-a"
    outcome = start_attempt(research_request(teams_app, at_dataset_directory(below)), "own")
    assert outcome.error != "RequestRefused", outcome.cause
    [call] = world.submitted_by("research")
    assert below in call["serviceRequestPayload"]


def test_a_resume_from_through_dots_into_the_other_teams_run_is_invalid_input(world):
    """The pipeline's own input rule refuses it first, in the sentence of the field (not the attempt
    machine's RequestRefused)."""
    uri = f"s3://{CHECKPOINTS}/trainstack-research-r0/../{B_RUN}/"
    outcome = harness.run(pipeline_of("research"), {"resumeFrom": uri}, "dots-resume")
    assert (outcome.status, outcome.error) == ("FAILED", "InvalidInput"), outcome.cause
    assert outcome.cause == "resumeFrom must be a normalized S3 URI, with no . or .. segment and no //."
    assert world.submitted_by("research") == []
