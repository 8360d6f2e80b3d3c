"""The training state machine exactly as `make synth` wrote it to cdk.out, ready for the local emulator.

CloudFormation fills the definition's `${Name}` placeholders (DefinitionSubstitutions) at deploy
time with the role, image, buckets, subnets and file system; locally they get stand-in values of
the same shape, chosen by the placeholder's name. References CloudFormation resolves (Fn::Join of the
partition and of the ARNs of the state machines the pipeline starts, such as its attempt machine, or of
their published versions) become the values they have in moto; those machines come along in `children`,
to be created with their version 1 published.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localaws.emulator.versions import referenced_machine_arn
from trainstack.queue_settings import training_queue_name

ACCOUNT = "123456789012"  # moto's default account


class SynthesizedPipelineError(Exception):
    """cdk.out holds no pipeline for this project; str() says what to run."""


@dataclass(frozen=True)
class SynthesizedPipeline:
    template_path: Path
    name: str  # StateMachineName
    definition: str  # placeholders filled
    substitutions: dict[str, str]  # placeholder -> the local value it got
    # State machines the pipeline starts, and those they start (StateMachineName -> definition), the
    # deepest first: create them in this order, before the pipeline, each with `publish` (the parents name
    # version 1).
    children: dict[str, str]

    @property
    def states(self) -> int:
        return sum(_count_states(json.loads(text)) for text in (self.definition, *self.children.values()))


def load_pipeline(
    cdk_out: Path,
    project: str,
    region: str,
    name: str | None = None,
    namespace: str | None = None,
    queue_name: str | None = None,
) -> SynthesizedPipeline:
    """The `<namespace>-pipeline` state machine (or the one named `name`) of
    `<cdk_out>/<namespace>-pipeline.template.json`; the namespace is the project's, or with teams a team's
    `<project>-<team>` (the deploy-time values stay the project's: one bucket, image and queue for all).
    `queue_name`: queue mode's job queue (default: the project's)."""
    namespace = namespace or project
    template_path = cdk_out / f"{namespace}-pipeline.template.json"
    if not template_path.exists():
        raise SynthesizedPipelineError(
            f"{template_path} does not exist; run `make synth` with this config first"
        )
    template = json.loads(template_path.read_text())
    machines = {
        body["Properties"].get("StateMachineName"): body["Properties"]
        for body in template.get("Resources", {}).values()
        if body.get("Type") == "AWS::StepFunctions::StateMachine"
    }
    name = name or f"{namespace}-pipeline"
    if name not in machines:
        raise SynthesizedPipelineError(f"{template_path} has no state machine named {name}")
    properties = machines[name]
    resources = template["Resources"]
    referenced: list[str] = []

    def machine_arn(machine_name: str) -> str:
        return f"arn:aws:states:{region}:{ACCOUNT}:stateMachine:{machine_name}"

    def value_of(part: Any) -> str:
        if isinstance(part, str):
            return part
        if part == {"Ref": "AWS::Partition"}:
            return "aws"
        if _is_job_queue_arn(part):  # queue mode's job queue
            return f"arn:aws:batch:{region}:{ACCOUNT}:job-queue/{queue_name or training_queue_name(project)}"
        arn = referenced_machine_arn(resources, part.get("Ref", ""), machine_arn)
        if arn is None:
            raise SynthesizedPipelineError(f"{template_path}: the definition of {name} refers to {part}")
        referenced.append(arn.split(":")[6])
        return arn

    def text_of(definition: Any) -> str:
        return (
            definition if isinstance(definition, str) else "".join(map(value_of, definition["Fn::Join"][1]))
        )

    substitutions: dict[str, str] = {}

    def filled(machine: dict[str, Any]) -> str:
        text = text_of(machine["DefinitionString"])
        for placeholder in machine.get("DefinitionSubstitutions", {}):
            substitutions[placeholder] = local_value(placeholder, project, region)
            text = text.replace("${" + placeholder + "}", substitutions[placeholder])
        return text

    definition = filled(properties)
    children: dict[str, str] = {}
    while referenced:  # the children's own children too (the registration's dataset manifest)
        child = referenced.pop(0)
        if child not in children:
            children[child] = filled(machines[child])
    children = dict(reversed(children.items()))  # the deepest first: each exists before its parent
    return SynthesizedPipeline(template_path, name, definition, substitutions, children)


def _is_job_queue_arn(part: dict[str, Any]) -> bool:
    """The job queue's ARN: a GetAtt in the same stack, or, with teams, the queue stack's output that the CDK
    publishes for it (its OutputName ends with the attribute's name)."""
    output = part.get("Fn::GetStackOutput", {}).get("OutputName", "")
    return part.get("Fn::GetAtt", [None, None])[1] == "JobQueueArn" or "JobQueueArn" in output


def create_tables(template: dict[str, Any], region: str) -> None:
    """Create, in the emulated account, every DynamoDB table `template` declares (name, keys, billing), as
    CloudFormation would (queue mode's run-name table), but those that exist already."""
    from localaws import clients

    dynamodb = clients.client("dynamodb", region)
    existing = set(dynamodb.list_tables()["TableNames"])  # e.g. registry_run's lease table
    for body in template.get("Resources", {}).values():
        if body.get("Type") == "AWS::DynamoDB::Table" and body["Properties"]["TableName"] not in existing:
            properties = body["Properties"]
            dynamodb.create_table(
                TableName=properties["TableName"],
                KeySchema=properties["KeySchema"],
                AttributeDefinitions=properties["AttributeDefinitions"],
                BillingMode=properties["BillingMode"],
            )


def local_value(placeholder: str, project: str, region: str) -> str:
    """A stand-in of the right shape for a deploy-time value, by the placeholder's name."""
    index = "".join(character for character in placeholder if character.isdigit()) or "0"
    kinds = (
        ("RoleArn", f"arn:aws:iam::{ACCOUNT}:role/{project}-sagemaker"),
        ("ImageUri", f"{ACCOUNT}.dkr.ecr.{region}.amazonaws.com/{project}-training:local"),
        ("Bucket", f"{project}-{placeholder.removesuffix('Bucket').lower()}-local"),
        ("Subnet", f"subnet-0123456789abcdef{index}"),
        ("SecurityGroup", f"sg-0123456789abcdef{index}"),
        ("FileSystemId", "fs-0123456789abcdef0"),
        ("CheckpointDirectoryPath", "/local/checkpoints/all"),
        ("DirectoryPath", "/local/datasets"),
        ("Arn", f"arn:aws:local:{region}:{ACCOUNT}:{placeholder}"),
    )
    for marker, value in kinds:
        if marker in placeholder:
            return value
    return f"{project}-{placeholder.lower()}"


def _count_states(definition: dict[str, Any]) -> int:
    total = 0
    for state in definition.get("States", {}).values():
        total += 1
        for branch in state.get("Branches", []):
            total += _count_states(branch)
        if "ItemProcessor" in state or "Iterator" in state:
            total += _count_states(state.get("ItemProcessor") or state["Iterator"])
    return total
