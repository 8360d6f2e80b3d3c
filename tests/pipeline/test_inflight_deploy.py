"""A deploy in the middle of a run (docs/pipeline.md, "What a deploy does to runs in flight"): the run
keeps its release's inner machines, image and request checks through its later attempts, its evaluation and
its registration; a run started after the deploy runs the new release.

The "previous release" is today's synthesized pipeline deployed with the deploy-time values that change
between releases (DefinitionSubstitutions): the image tag, an asset hash that changes with any rebuild, and
the FSx directory path (`/` before the dataset got its own association at `/dataset`). Releases from before
the inner machines were versioned cannot be run here: their parents name the unqualified ARNs, so a deploy
changes their children under them whatever this release does (the limit docs/pipeline.md states).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import boto3
import pytest

from localaws.emulator.versions import deploy_state_machines
from localaws.sagemaker import (
    CAPACITY_FAILURE,
    COMPLETED,
    STARTING,
    TRAINING,
    FakeSageMaker,
    evaluated,
    scripted_sagemaker,
)
from tests.pipeline import harness
from tests.pipeline.conftest import (
    FAKE_VALUES,
    REGISTRY_GROUP,
    REGISTRY_PROFILE,
    deploy_registry_resources,
    fake_value,
    filled_definition,
    state_machine_arn,
)

NEW_IMAGE = FAKE_VALUES["TrainingImageUri"]
OLD_IMAGE = NEW_IMAGE.rsplit(":", 1)[0] + ":0123456789abcdef-previous-asset-hash"
OLD_DIRECTORY = FAKE_VALUES["FileSystemDirectoryPath"].rsplit("/", 1)[0]  # the dataset's old association at /
# What differs between the previous release's deploy and this one's, by placeholder.
IMAGE_REBUILT = {"TrainingImageUri": OLD_IMAGE}
RELEASE_UPGRADED = {**IMAGE_REBUILT, "FileSystemDirectoryPath": OLD_DIRECTORY}
PIPELINE = state_machine_arn("trainstack-pipeline")
ATTEMPT = state_machine_arn("trainstack-pipeline-attempt")
REGISTRATION = state_machine_arn("trainstack-pipeline-registration")


@dataclass
class World:
    fake: FakeSageMaker
    release: Callable[[dict[str, str]], dict[str, str]]  # deploys with these values; new version ARNs
    deployed_during: list[str] = field(default_factory=list)  # training jobs created before the deploy
    published: list[str] = field(default_factory=list)  # the version ARNs the deploy published

    def deploy(self) -> None:
        """Deploy this release over the previous one."""
        self.published.extend(self.release({}).values())


@pytest.fixture
def world(pipeline, monkeypatch) -> Iterator[Callable[..., World]]:
    """world(previous) -> the previous release deployed (this release's values but `previous`), a deploy of
    this one ready; its SageMaker: attempt 1 loses its capacity while training, attempt 2 completes, every
    evaluation reports loss 1.0."""
    contexts = []

    def start(previous: dict[str, str]) -> World:
        fake = scripted_sagemaker(
            job_scripts=[[STARTING, TRAINING, TRAINING, CAPACITY_FAILURE], [STARTING, TRAINING, COMPLETED]],
            evaluation_script=evaluated(1.0),
        )
        context = harness.pipeline_environment(fake, monkeypatch)
        context.__enter__()
        contexts.append(context)
        deploy_registry_resources(pipeline.settings)
        boto3.client("sagemaker").create_model_package_group(ModelPackageGroupName=REGISTRY_GROUP)

        def deploy(values: dict[str, str]) -> dict[str, str]:
            return deploy_state_machines(
                pipeline.template["Resources"],
                lambda properties, versions: filled_definition(
                    properties, pipeline.template, lambda name: values.get(name) or fake_value(name), versions
                ),
                region=harness.REGION,
                role_arn=harness.ROLE_ARN,
            )

        deploy(previous)
        return World(fake=fake, release=deploy)

    yield start
    for context in reversed(contexts):
        context.__exit__(None, None, None)


def deploy_during_attempt_1(world: World) -> None:
    """Deploy this release as attempt 1's training job is created (the run is inside attempt 1 from then
    on)."""
    start = world.fake.behaviour.start

    def start_after_deploy(job):
        if not world.deployed_during:
            world.deployed_during.extend(world.fake.jobs)
            world.deploy()
        return start(job)

    world.fake.behaviour.start = start_after_deploy


def run(name: str) -> harness.Outcome:
    execution_input = {"profile": REGISTRY_PROFILE, "runName": name, "hyperparameters": {}}
    return harness.run(PIPELINE, execution_input, name=name)


def directories(request: dict) -> set[str]:
    """The FSx directory paths of a CreateTrainingJob request's channels."""
    return {
        channel["DataSource"]["FileSystemDataSource"]["DirectoryPath"]
        for channel in request.get("InputDataConfig", [])
        if "FileSystemDataSource" in channel["DataSource"]
    }


@pytest.mark.parametrize(
    "previous", [RELEASE_UPGRADED, IMAGE_REBUILT], ids=["release-upgraded", "image-rebuilt"]
)
def test_a_run_in_flight_finishes_evaluates_and_registers_on_its_own_release(world, previous):
    w = world(previous)
    deploy_during_attempt_1(w)

    outcome = run("trainstack-inflight")

    assert outcome.status == "SUCCEEDED", outcome.cause
    assert w.deployed_during == ["trainstack-inflight-1"]  # attempt 1's job, not yet created
    assert outcome.output["attempts"] == 2
    assert outcome.output["modelPackage"]["decision"] == "Approved"
    requests = {name: job.request for name, job in w.fake.jobs.items()}
    assert sorted(requests) == ["trainstack-inflight-1", "trainstack-inflight-2", "trainstack-inflight-eval"]
    # Attempt 2 and the evaluation ran after the deploy, on the previous release's image and data path.
    old_directory = previous.get("FileSystemDirectoryPath", FAKE_VALUES["FileSystemDirectoryPath"])
    for request in requests.values():
        assert request["AlgorithmSpecification"]["TrainingImage"] == OLD_IMAGE
        assert directories(request) <= {old_directory}
    # The deploy published new versions of the inner machines; the run kept using the first ones.
    assert {f"{ATTEMPT}:2", f"{REGISTRATION}:2"} <= set(w.published)


def test_a_run_started_after_the_deploy_runs_the_new_release(world):
    w = world(RELEASE_UPGRADED)
    w.deploy()

    outcome = run("trainstack-after")

    assert outcome.status == "SUCCEEDED", outcome.cause
    for job in w.fake.jobs.values():
        assert job.request["AlgorithmSpecification"]["TrainingImage"] == NEW_IMAGE
