"""The training state machine exactly as `make synth` wrote it to cdk.out, ready for the local emulator.

CloudFormation fills the definition's `${Name}` placeholders (DefinitionSubstitutions) at deploy
time with the role, image, buckets, subnets and file system; locally they get stand-in values of
the same shape, chosen by the placeholder's name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ACCOUNT = "123456789012"  # moto's default account


class SynthesizedPipelineError(Exception):
    """cdk.out holds no pipeline for this project; str() says what to run."""


@dataclass(frozen=True)
class SynthesizedPipeline:
    template_path: Path
    name: str  # StateMachineName
    definition: str  # placeholders filled
    substitutions: dict[str, str]  # placeholder -> the local value it got

    @property
    def states(self) -> int:
        return _count_states(json.loads(self.definition))


def load_pipeline(cdk_out: Path, project: str, region: str) -> SynthesizedPipeline:
    """The `<project>-pipeline` state machine of `<cdk_out>/<project>-pipeline.template.json`."""
    template_path = cdk_out / f"{project}-pipeline.template.json"
    if not template_path.exists():
        raise SynthesizedPipelineError(f"{template_path} does not exist; run `make synth` first")
    template = json.loads(template_path.read_text())
    machines = {
        body["Properties"].get("StateMachineName"): body["Properties"]
        for body in template.get("Resources", {}).values()
        if body.get("Type") == "AWS::StepFunctions::StateMachine"
    }
    name = f"{project}-pipeline"
    if name not in machines:
        raise SynthesizedPipelineError(f"{template_path} has no state machine named {name}")
    properties = machines[name]
    definition = properties["DefinitionString"]
    if not isinstance(definition, str):
        raise SynthesizedPipelineError(f"{template_path}: the definition of {name} is not a plain string")
    substitutions = {
        placeholder: local_value(placeholder, project, region)
        for placeholder in properties.get("DefinitionSubstitutions", {})
    }
    for placeholder, value in substitutions.items():
        definition = definition.replace("${" + placeholder + "}", value)
    return SynthesizedPipeline(template_path, name, definition, substitutions)


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
