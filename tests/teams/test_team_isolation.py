"""Two teams in one deployment (config/examples/teams.yaml), in the emulator: every way issue 38 found for one
team to read, overwrite, stop or outspend another's work, tried by team research with nothing but an
execution input while team search's run is RUNNING. Each ends with a named error before research submits any
job, and search's run ends SUCCEEDED, untouched.

Both teams' pipelines are the synthesized definitions of their own stacks (trainstack-<team>-pipeline), run
against one FakeBatch queue with both teams' shares and one FakeSageMaker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from localaws.demo.synthesized import create_tables
from localaws.emulator.fake_batch import FakeBatch
from localaws.sagemaker import COMPLETED, STARTING, TRAINING, evaluated, scripted_sagemaker
from stacks.pipeline.state_machine_facts import substitution_names, with_values
from tests.pipeline import harness
from tests.pipeline.conftest import (
    FAKE_VALUES,
    deploy_registry_resources,
    fake_value,
    state_machine_arn,
    state_machines,
)
from tests.queue.test_queue_pipeline import ended_event, filled, install_queue
from trainstack.job_request import RunRequest, build_create_training_job_request
from trainstack.pipeline_runs import runs_for, shared_queue

MACHINES = ("pipeline", "pipeline-attempt", "pipeline-registration", "dataset-manifest", "queue-cleanup")
CHECKPOINTS, ARTIFACTS = FAKE_VALUES["CheckpointBucket"], FAKE_VALUES["ArtifactBucket"]
# small-torchrun checkpoints in the team's s3-express directory bucket (one fake name serves both teams).
EXPRESS = FAKE_VALUES["ExpressCheckpointBucket"]
B_RUN = "trainstack-search-nightly"


@pytest.fixture(scope="module")
def definitions(teams_app) -> dict[str, str]:
    """State machine name -> its filled definition, both teams'."""
    _, stacks, assembly = teams_app
    found = {}
    for stack in stacks.pipelines:
        template = assembly.get_stack_by_name(stack.stack_name).template
        team = stack.stack_name.split("-")[1]
        for name, properties in state_machines(template).items():
            # Each team's own fsx checkpoint directory, as its stack resolves it (test_teams_template.py).
            text = filled(properties, template)
            found[name] = text.replace(FAKE_VALUES["CheckpointDirectoryPath"], checkpoint_directory(team))
    return found


def checkpoint_directory(team: str) -> str:
    return FAKE_VALUES["CheckpointDirectoryPath"].removesuffix("/all") + f"/{team}"


@dataclass
class World:
    batch: FakeBatch
    sagemaker: Any

    def submitted_by(self, team: str) -> list[dict[str, Any]]:
        return [
            call
            for operation, call in self.batch.calls
            if operation == "SubmitServiceJob" and f"trainstack-{team}-" in call["serviceRequestPayload"]
        ]


@pytest.fixture
def world(teams_app, definitions, monkeypatch):
    # search's first job runs until the test releases it; evaluation jobs complete with loss 2.0.
    settings = teams_app[0]
    sagemaker = scripted_sagemaker(job_scripts=[[STARTING, TRAINING]], evaluation_script=evaluated(2.0))
    context = harness.pipeline_environment(sagemaker, monkeypatch)
    clock = context.__enter__()
    deploy_registry_resources(settings)  # each team's model package groups
    batch = install_queue(shared_queue(settings), sagemaker, clock, monkeypatch)
    _, stacks, assembly = teams_app
    for stack in assembly.stacks:  # the run-name table, each team's budget table: as CloudFormation would
        create_tables(stack.template, harness.REGION)
    for team in ("research", "search"):
        for machine in MACHINES:
            name = f"trainstack-{team}-{machine}"
            harness.create_state_machine(definitions[name], name)
    yield World(batch, sagemaker)
    context.__exit__(None, None, None)


def pipeline_of(team: str) -> str:
    return state_machine_arn(f"trainstack-{team}-pipeline")


def release_search_job(world: World) -> None:
    harness.wait_until(lambda: world.sagemaker.jobs)
    next(iter(world.sagemaker.jobs.values())).run.phases.append(COMPLETED)


# (id, research's execution input, the start of the InvalidInput cause): each row of issue 38's table.
ATTACKS = [
    (
        "resume-from-the-other-teams-checkpoints",
        {"resumeFrom": f"s3://{CHECKPOINTS}/{B_RUN}/"},
        "resumeFrom must lie in a run of trainstack-research:",
    ),
    (
        "resume-from-the-other-teams-directory-bucket",
        {"resumeFrom": f"s3://{EXPRESS}/{B_RUN}/"},
        "resumeFrom must lie in a run of trainstack-research:",
    ),
    (
        "init-from-the-other-teams-model",
        {
            "profile": "small-torchrun",
            "resumeFrom": f"s3://{ARTIFACTS}/{B_RUN}/{B_RUN}-1/output/model/",
            "hyperparameters": {"init_from": "/opt/ml/input/data/resume"},
        },
        "resumeFrom must lie in a run of trainstack-research:",
    ),
    (
        "resume-from-a-bucket-of-another-account",
        {"resumeFrom": "s3://someone-elses-bucket/trainstack-research-mine/"},
        "resumeFrom must lie in a run of trainstack-research:",
    ),
    ("reuse-the-other-teams-run-name", {"runName": B_RUN}, "runName must start with 'trainstack-research-'"),
    (
        "the-other-teams-run-name-with-a-bad-count",
        {"runName": B_RUN, "instanceCount": 0},
        "runName must start with 'trainstack-research-'",
    ),
    ("the-other-teams-share", {"share": "search"}, "share must be one of the queue's shares: research."),
    ("a-priority-above-the-teams-cap", {"priority": 9999}, "priority must be a whole number from 0 to 100"),
    (
        "more-instances-than-the-teams-cap",
        {"instanceCount": 512},
        "instanceCount must be a whole number from 1 to 4.",
    ),
    (
        "longer-than-the-teams-cap",
        {"maxRuntimeHours": 672},
        "maxRuntimeHours must be a number from 0.01 to 48.",
    ),
    (
        "a-step-count-the-toolkit-reads-as-99999999",
        {"profile": "llama-7b-smp", "hyperparameters": {"max_steps": "+99999999"}},
        "hyperparameters.max_steps must be a whole number of steps from 1 to 999999999 in plain digits",
    ),
    (
        "a-cost-above-the-teams-cap-on-a-profile-without-one",
        {"profile": "llama-7b-smp", "hyperparameters": {"max_steps": "99999999"}},
        "The run's planned cost of",
    ),
]


def test_no_input_of_one_team_touches_the_other_teams_running_run(world):
    b = harness.start(pipeline_of("search"), {"runName": B_RUN, "profile": "small-torchrun"}, "b-nightly")
    harness.wait_until(lambda: world.sagemaker.jobs)
    for index, (case, execution_input, cause) in enumerate(ATTACKS):
        outcome = harness.run(pipeline_of("research"), execution_input, f"attack{index}")
        assert (outcome.status, outcome.error) == ("FAILED", "InvalidInput"), (case, outcome.cause)
        assert outcome.cause.startswith(cause), (case, outcome.cause)
        # research's queue cleanup runs for its failed execution, as EventBridge starts it.
        cleanup = harness.run(
            state_machine_arn("trainstack-research-queue-cleanup"),
            ended_event(outcome.execution_arn),
            f"cleanup-{case}",
        )
        assert cleanup.status == "SUCCEEDED", (case, cleanup.cause)
    assert world.submitted_by("research") == []
    [b_job] = world.batch.jobs.values()
    assert (b_job.status, b_job.terminated) == ("RUNNING", False)
    release_search_job(world)
    outcome = harness.wait_for(b)
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert outcome.output["checkpointUri"] == f"s3://{EXPRESS}/{B_RUN}/"
    assert world.sagemaker.stop_requests == []


def test_a_team_runs_within_its_own_prefixes_share_and_dataset_directory(world):
    world.sagemaker.behaviour.script([[STARTING, TRAINING, COMPLETED]])
    outcome = harness.run(
        pipeline_of("research"),
        {
            "runName": "trainstack-research-r1",
            "profile": "llama-7b-smp",
            "hyperparameters": {"max_steps": "10"},
            # research's own s3-express run: "own-runs" and the request check accept its directory bucket
            "resumeFrom": f"s3://{EXPRESS}/trainstack-research-r0/",
        },
        "r1",
    )
    assert outcome.status == "SUCCEEDED", outcome.cause
    [call] = world.submitted_by("research")
    assert call["shareIdentifier"] == "research"
    [job] = world.sagemaker.created
    assert job["RoleArn"] == FAKE_VALUES["SageMakerRoleArn"]
    assert job["CheckpointConfig"]["S3Uri"] == f"s3://{CHECKPOINTS}/trainstack-research-r1/"
    [resume] = [channel for channel in job["InputDataConfig"] if channel["ChannelName"] == "resume"]
    assert resume["DataSource"]["S3DataSource"]["S3Uri"] == f"s3://{EXPRESS}/trainstack-research-r0/"


def research_request(teams_app, edit=None) -> dict[str, Any]:
    """The request research's pipeline itself sends for attempt 1 of a run of llama-7b-smp, edited."""
    settings, stacks, _ = teams_app
    stack = stacks.pipelines[0]
    resources = with_values(
        stack.resources, {name: fake_value(name) for name in substitution_names(stack.resources)}
    )
    profile = runs_for(settings, "research").profile("llama-7b-smp")
    request = build_create_training_job_request(
        profile,
        resources,
        RunRequest(profile=profile.name, run_name="trainstack-research-direct"),
        1,
        "arn:x",
    )
    if edit:
        edit(request)
    return request


def _as_search(request: dict[str, Any]) -> None:
    request["TrainingJobName"] = f"{B_RUN}-9"
    request["CheckpointConfig"]["S3Uri"] = f"s3://{CHECKPOINTS}/{B_RUN}/"


def _into_the_other_teams_directory_bucket(request: dict[str, Any]) -> None:
    # A session opens a whole directory bucket: search's, or research's own bucket at search's run.
    request["HyperParameters"]["checkpoint_dir"] = "s3://trainstack-search-ckpt-1--use1-az4--x-s3/x/"


def _the_other_teams_code(request: dict[str, Any]) -> None:
    # trainstack.team_code: search's bundle, at a proper digest address in search's own code prefix.
    bundle = f"s3://{ARTIFACTS}/code/trainstack-search/{'0' * 64}/sourcedir.tar.gz"
    request["HyperParameters"].update(sagemaker_submit_directory=f'"{bundle}"', sagemaker_program='"fit.py"')


def _beyond_the_cap(request: dict[str, Any]) -> None:
    request["ResourceConfig"]["InstancePreferences"] = [
        {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 64}
    ]


@pytest.mark.parametrize(
    ("edit", "share", "cause"),
    [
        (_as_search, "research", "TrainingJobName must start with trainstack-research-"),
        (
            _into_the_other_teams_directory_bucket,
            "research",
            f"HyperParameters.checkpoint_dir: a directory bucket location must lie under s3://{EXPRESS}/"
            "trainstack-research-.",
        ),
        (
            _the_other_teams_code,
            "research",
            "HyperParameters.sagemaker_submit_directory must be the team's code, "
            f"s3://{ARTIFACTS}/code/trainstack-research/<sha256",
        ),
        (_beyond_the_cap, "research", "ResourceConfig asks for 64 x ml.p5.48xlarge"),
        (None, "search", "share must be one of research"),
    ],
    ids=[
        "the-other-teams-run",
        "the-other-teams-directory-bucket",
        "the-other-teams-code",
        "beyond-the-teams-cap",
        "the-other-teams-share",
    ],
)
def test_a_teams_attempt_machine_started_directly_refuses_what_the_team_may_not_do(
    world, teams_app, edit, share, cause
):
    far = 10**13
    outcome = harness.run(
        state_machine_arn("trainstack-research-pipeline-attempt"),
        {
            "request": research_request(teams_app, edit),
            "runName": "trainstack-research-direct",
            "stopAtMillis": far,
            "timeLimitSeconds": far,
            "throttles": 0,
            "share": share,
        },
    )
    assert (outcome.status, outcome.error) == ("FAILED", "RequestRefused"), outcome.cause
    assert outcome.cause.startswith(cause), outcome.cause
    assert [operation for operation, _ in world.batch.calls if operation == "SubmitServiceJob"] == []


def _mounting(team: str):
    def edit(request: dict[str, Any]) -> None:
        source = {
            "FileSystemId": FAKE_VALUES["FileSystemId"],
            "FileSystemType": "FSxLustre",
            "DirectoryPath": checkpoint_directory(team),
            "FileSystemAccessMode": "rw",
        }
        channel = {"ChannelName": "checkpoints", "DataSource": {"FileSystemDataSource": source}}
        request["InputDataConfig"].append({**channel, "InputMode": "File"})

    return edit


@pytest.mark.parametrize("team", ["search", "research"])
def test_without_the_fsx_store_no_team_mounts_a_checkpoint_directory(world, teams_app, team):
    """research's attempt machine, started directly: config/examples/teams.yaml has no profile on the fsx
    store, so the file system holds no checkpoint directory (the dataset's association sits at /:
    stacks/storage/file_system_links.py); a checkpoint channel at search's /<mount>/checkpoints/search or
    at research's own is refused before any job, and the refusal names the team's dataset directory only."""
    world.sagemaker.behaviour.script([[STARTING, TRAINING, COMPLETED]])
    far = 10**13
    outcome = harness.run(
        state_machine_arn("trainstack-research-pipeline-attempt"),
        {
            "request": research_request(teams_app, _mounting(team)),
            "runName": "trainstack-research-direct",
            "stopAtMillis": far,
            "timeLimitSeconds": far,
            "throttles": 0,
            "share": "research",
        },
    )
    assert (outcome.status, outcome.error) == ("FAILED", "RequestRefused"), outcome.cause
    assert outcome.cause.startswith("InputDataConfig: a FileSystemDataSource must be file system")
    assert "checkpoints" not in outcome.cause
    assert world.submitted_by("research") == []
