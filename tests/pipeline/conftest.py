"""The synthesized pipeline definitions, their DefinitionSubstitutions filled with fake deploy-time values."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from localaws import clients
from localaws.demo import registry_run
from localaws.emulator import VirtualClock
from localaws.emulator.versions import referenced_machine_arn
from localaws.sagemaker import (
    COMPLETED,
    STARTING,
    TRAINING,
    FakeSageMaker,
    Phase,
    evaluated,
    scripted_sagemaker,
)
from stacks.pipeline.state_machine_facts import substitution_names, with_values
from tests.infra.templates import resources
from tests.pipeline import harness
from trainstack.config import Settings
from trainstack.job_request import PipelineResources

# Realistic values (botocore's model checks lengths and patterns of some of them).
FAKE_VALUES = {
    "SageMakerRoleArn": f"arn:aws:iam::{harness.ACCOUNT}:role/trainstack-sagemaker",
    "TrainingImageUri": f"{harness.ACCOUNT}.dkr.ecr.{harness.REGION}.amazonaws.com/trainstack-training:v1",
    "CheckpointBucket": "trainstack-checkpoints-test",
    "ArtifactBucket": "trainstack-artifacts-test",
    "DatasetBucket": "trainstack-datasets-test",
    "ExpressCheckpointBucket": "trainstack-ckpt-111111111111--use1-az4--x-s3",
    "TrainingSecurityGroup0": "sg-0123456789abcdef0",
    "FileSystemId": "fs-0123456789abcdef0",
    "RunDataKeyArn": "arn:aws:kms:us-east-1:111111111111:key/0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b",
    "FileSystemDirectoryPath": "/abcdefgh/dataset",
    "CheckpointDirectoryPath": "/abcdefgh/checkpoints/all",
}


def fake_value(name: str) -> str:
    if name.startswith("TrainingSubnet"):
        return f"subnet-0123456789abcdef{name.removeprefix('TrainingSubnet')}"
    return FAKE_VALUES[name]


def state_machines(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """State machine properties by StateMachineName."""
    return {
        body["Properties"]["StateMachineName"]: body["Properties"]
        for body in resources(template, "AWS::StepFunctions::StateMachine").values()
    }


def state_machine_arn(name: str) -> str:
    return f"arn:aws:states:{harness.REGION}:{harness.ACCOUNT}:stateMachine:{name}"


def filled_definition(
    properties: dict[str, Any],
    template: dict[str, Any],
    values: Callable[[str], str] = fake_value,
    versions: Mapping[str, str] | None = None,
    other_references: Callable[[dict[str, Any]], str | None] = lambda part: None,
) -> str:
    """The DefinitionString as CloudFormation would deploy it, with fake values substituted: Fn::Join
    parts joined (the partition, `other_references`' value for a part where it has one, other state
    machines' ARNs by name, their published versions' ARNs: `versions` by logical id, else version 1) and
    DefinitionSubstitutions filled from `values`."""
    text = properties["DefinitionString"]
    if isinstance(text, dict):
        text = "".join(
            _reference_value(part, template, versions, other_references) for part in text["Fn::Join"][1]
        )
    for name in properties.get("DefinitionSubstitutions", {}):
        text = text.replace("${" + name + "}", values(name))
    assert "${" not in text, "a placeholder has no DefinitionSubstitutions entry"
    return text


def _reference_value(
    part: Any,
    template: dict[str, Any],
    versions: Mapping[str, str] | None,
    other_references: Callable[[dict[str, Any]], str | None],
) -> str:
    if isinstance(part, str):
        return part
    if part == {"Ref": "AWS::Partition"}:
        return "aws"
    if (other := other_references(part)) is not None:
        return other
    arn = referenced_machine_arn(template["Resources"], part["Ref"], state_machine_arn, versions)
    assert arn is not None, part
    return arn


@dataclass(frozen=True)
class SynthesizedPipeline:
    settings: Settings
    template: dict[str, Any]
    training_definition: str  # filled
    attempt_definition: str  # filled
    cleanup_definition: str  # filled
    registration_definition: str  # filled
    manifest_definition: str  # filled: the dataset manifest's child machine (manifest_listing.py)
    resources: PipelineResources  # what the stack passed to the builder, with the fake values

    @property
    def raw_training_definition(self) -> dict[str, Any]:
        return json.loads(self.training_definition)


def synthesized_pipeline(settings: Settings, stacks, assembly) -> SynthesizedPipeline:
    stack = stacks.pipeline
    template = assembly.get_stack_by_name(stack.stack_name).template
    machines = state_machines(template)
    project = settings.project
    return SynthesizedPipeline(
        settings=settings,
        template=template,
        training_definition=filled_definition(machines[f"{project}-pipeline"], template),
        attempt_definition=filled_definition(machines[f"{project}-pipeline-attempt"], template),
        cleanup_definition=filled_definition(machines[f"{project}-job-cleanup"], template),
        registration_definition=filled_definition(machines[f"{project}-pipeline-registration"], template),
        manifest_definition=filled_definition(machines[f"{project}-dataset-manifest"], template),
        resources=with_values(
            stack.resources, {name: fake_value(name) for name in substitution_names(stack.resources)}
        ),
    )


@pytest.fixture(scope="session")
def pipeline(default_app) -> SynthesizedPipeline:
    return synthesized_pipeline(*default_app)


TRAINING_KEYS = ("datasets/train-000.bin", "datasets/train-001.bin")


def deploy_registry_resources(settings: Settings) -> None:
    """What the deployed stacks hold that the registration machine reads (docs/registry.md): the dataset
    bucket with a training set, and localaws.demo.registry_run's evaluation set, image and groups."""
    s3 = clients.client("s3")
    s3.create_bucket(Bucket=FAKE_VALUES["DatasetBucket"])
    for key in TRAINING_KEYS:
        s3.put_object(Bucket=FAKE_VALUES["DatasetBucket"], Key=key, Body=key.encode())
    registry_run.deploy_registry_resources(
        settings, FAKE_VALUES["DatasetBucket"], FAKE_VALUES["TrainingImageUri"]
    )


@dataclass
class Interpreter:
    """moto's Step Functions running the pipeline definitions against FakeSageMaker."""

    fake: FakeSageMaker
    clock: VirtualClock
    pipeline_arn: str
    attempt_arn: str
    cleanup_arn: str
    registration_arn: str

    def run(self, execution_input: Any, name: str = "exec-1") -> harness.Outcome:
        return harness.run(self.pipeline_arn, execution_input, name)

    def attempts(self) -> list[harness.Outcome]:
        return harness.executions(self.attempt_arn)


@pytest.fixture
def interpreter(pipeline, monkeypatch) -> Iterator[Callable[..., Interpreter]]:
    """interpreter(job_scripts=..., create_errors=...) -> Interpreter inside one mock_aws session;
    `registration_definition` deploys another registration machine than the synthesized one."""
    contexts = []

    def start(registration_definition: str | None = None, **fake_fields: Any) -> Interpreter:
        fake = scripted_sagemaker(**fake_fields)
        context = harness.pipeline_environment(fake, monkeypatch)
        clock = context.__enter__()
        contexts.append(context)
        deploy_registry_resources(pipeline.settings)
        harness.create_state_machine(pipeline.manifest_definition, "trainstack-dataset-manifest")
        return Interpreter(
            fake=fake,
            clock=clock,
            attempt_arn=harness.create_state_machine(
                pipeline.attempt_definition, "trainstack-pipeline-attempt"
            ),
            pipeline_arn=harness.create_state_machine(pipeline.training_definition, "trainstack-pipeline"),
            cleanup_arn=harness.create_state_machine(pipeline.cleanup_definition, "trainstack-job-cleanup"),
            registration_arn=harness.create_state_machine(
                registration_definition or pipeline.registration_definition,
                "trainstack-pipeline-registration",
            ),
        )

    yield start
    for context in reversed(contexts):
        context.__exit__(None, None, None)


# config/default.yaml: approval auto, loss_tolerance 0.01, first_version Approved; the default retry settings.
REGISTRY_PROFILE = "small-torchrun"
REGISTRY_GROUP = f"trainstack-{REGISTRY_PROFILE}"


@pytest.fixture
def registry(interpreter, pipeline):
    """run(name, loss) -> the run's Outcome: one run of REGISTRY_PROFILE whose evaluation reports `loss`, with
    the registration machine's profile table edited by `table` (e.g. approval manual, a shorter retry
    deadline; the table is a JSON literal inside the definition's JSON, hence the escaped quotes). `fake`
    are scripted_sagemaker's fields."""

    def start(table: dict[str, str] | None = None, **fake):
        definition = pipeline.registration_definition
        for old, new in (table or {}).items():
            assert old in definition
            definition = definition.replace(old, new)
        sm = interpreter(definition, job_scripts=[[STARTING, TRAINING, COMPLETED]], **fake)
        # The stack's group.
        clients.client("sagemaker").create_model_package_group(ModelPackageGroupName=REGISTRY_GROUP)

        def run(name: str, loss: float, *scripts: list[Phase]):
            """Evaluation job i follows scripts[i] (the last repeats), by default evaluated(loss)."""
            sm.fake.behaviour.script_evaluations(*(scripts or [evaluated(loss)]))
            return sm.run({"profile": REGISTRY_PROFILE, "runName": name, "hyperparameters": {}}, name=name)

        run.sm = sm
        return run

    return start
