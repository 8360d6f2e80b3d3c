"""State machine versions as AWS keeps their executions, and a deploy of new definitions over running ones.

moto publishes versions (CreateStateMachine/UpdateStateMachine `publish`) and starts executions of a
version ARN on the version's definition, but files each such execution under the version object, where
DescribeExecution, GetExecutionHistory and ListExecutions (which look executions up by the state machine's
name) never find it: a `.sync:2` parent polling a child started by version ARN would fail. On AWS an
execution of a version is one of the state machine's executions: its ARN carries the state machine's name
and no version ("Associating executions with a version or alias", Step Functions developer guide),
ListExecutions of the state machine's ARN lists it (a version ARN narrows the list to that version:
ListExecutions API reference), and execution names are unique per state machine. Here a version shares its
state machine's list of executions (and its name check).

`deploy_state_machines` is what CloudFormation does to a template's machines, on a first deploy or an
update: each machine created or its definition replaced (UpdateStateMachine), and for a machine with an
AWS::StepFunctions::StateMachineVersion a new version published from that revision. Executions already
running keep the definition they started with (Step Functions developer guide, "State machine versions").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from unittest import mock

import boto3

FIRST_VERSION = 1


def patches() -> list[Any]:
    from moto.stepfunctions.models import StateMachine, StateMachineVersion

    version_init = StateMachineVersion.__init__

    def init_sharing_executions(self, source, version: int, description: str | None) -> None:
        version_init(self, source, version, description)
        self.executions = source.executions
        self.backend = source.backend  # the executions it starts look other machines up there

    return [
        mock.patch.object(StateMachineVersion, "__init__", init_sharing_executions),
        # Names are unique per state machine: checked on the shared list, as for the machine itself.
        mock.patch.object(
            StateMachineVersion,
            "_handle_name_input_idempotency",
            StateMachine._handle_name_input_idempotency,
            create=True,
        ),
    ]


def published_machines(resources: Mapping[str, Any]) -> dict[str, str]:
    """The logical id of each AWS::StepFunctions::StateMachineVersion of a template's resources, by the
    logical id of the state machine it publishes."""
    return {
        body["Properties"]["StateMachineArn"]["Ref"]: logical_id
        for logical_id, body in resources.items()
        if body.get("Type") == "AWS::StepFunctions::StateMachineVersion"
    }


def referenced_machine_arn(
    resources: Mapping[str, Any],
    logical_id: str,
    machine_arn: Callable[[str], str],
    versions: Mapping[str, str] | None = None,
) -> str | None:
    """What a Ref to `logical_id` returns when it is a state machine (its ARN: `machine_arn(name)`) or a
    published version of one (the version's ARN, CloudFormation reference): the ARN `versions` holds for
    that version's logical id, by default version 1, a first deploy's. None when it is neither."""
    body = resources.get(logical_id, {})
    if body.get("Type") == "AWS::StepFunctions::StateMachine":
        return machine_arn(body["Properties"]["StateMachineName"])
    if body.get("Type") == "AWS::StepFunctions::StateMachineVersion":
        machine = resources[body["Properties"]["StateMachineArn"]["Ref"]]
        first = f"{machine_arn(machine['Properties']['StateMachineName'])}:{FIRST_VERSION}"
        return (versions or {}).get(logical_id, first)
    return None


def deploy_state_machines(
    resources: Mapping[str, Any],
    definition: Callable[[dict[str, Any], Mapping[str, str]], str],
    *,
    region: str,
    role_arn: str,
) -> dict[str, str]:
    """Create or update every state machine of a template's `resources` as CloudFormation would: children
    first, each machine with a version resource published after its update, the parents' definitions
    (`definition(properties, versions)`) filled with the version ARNs just published. Returns those ARNs
    by the version's logical id."""
    client = boto3.client("stepfunctions", region_name=region)
    existing = {
        machine["name"]: machine["stateMachineArn"]
        for machine in client.list_state_machines()["stateMachines"]
    }
    versions_of = published_machines(resources)
    machines = {
        logical_id: body
        for logical_id, body in resources.items()
        if body.get("Type") == "AWS::StepFunctions::StateMachine"
    }
    versions: dict[str, str] = {}
    for logical_id in _children_first(machines, resources):
        properties = machines[logical_id]["Properties"]
        name, text = properties["StateMachineName"], definition(properties, versions)
        publish = logical_id in versions_of
        if name in existing:
            answer = client.update_state_machine(
                stateMachineArn=existing[name], definition=text, publish=publish
            )
        else:
            answer = client.create_state_machine(
                name=name, definition=text, roleArn=role_arn, publish=publish
            )
        if publish:
            versions[versions_of[logical_id]] = answer["stateMachineVersionArn"]
    return versions


def _children_first(machines: Mapping[str, Any], resources: Mapping[str, Any]) -> list[str]:
    """Machine logical ids, each after the machines whose versions (or ARNs) its definition names."""

    def named(logical_id: str) -> set[str]:
        text = machines[logical_id]["Properties"]["DefinitionString"]
        parts = text["Fn::Join"][1] if isinstance(text, dict) else []
        found = set()
        for part in parts:
            reference = part.get("Ref") if isinstance(part, dict) else None
            body = resources.get(reference or "", {})
            if body.get("Type") == "AWS::StepFunctions::StateMachineVersion":
                found.add(body["Properties"]["StateMachineArn"]["Ref"])
            elif reference in machines:
                found.add(reference)
        return found

    ordered: list[str] = []

    def visit(logical_id: str) -> None:
        if logical_id not in ordered:
            for child in sorted(named(logical_id)):
                visit(child)
            ordered.append(logical_id)

    for logical_id in sorted(machines):
        visit(logical_id)
    return ordered
