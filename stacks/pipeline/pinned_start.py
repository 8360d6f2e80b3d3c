"""Starting an inner state machine through the version that the parent's own release published, so that a
run in flight keeps its release's children across a deploy (docs/pipeline.md, "What a deploy does to runs
in flight").

An execution keeps the definition it started with, but a child it starts by the unqualified ARN runs the
child's *current* definition; started by a version ARN it runs that version (Step Functions developer guide,
"State machine versions"). Each inner machine publishes a version of every revision
(AWS::StepFunctions::StateMachineVersion: StateMachineRevisionId forces a replacement, so a new revision is
a new version) and the parent's definition names that version's ARN: the parent's definition, fixed for its
whole run, fixes its children's. Old versions are retained on replacement and on delete: a run of the
previous release still starts them ("Before you delete a version, make sure that version's ARN isn't being
referenced in any long-running workflows", CloudFormation reference). Step Functions keeps up to 1000
versions per state machine.

IAM: Step Functions authorizes an action on a version or alias against the state machine's unqualified ARN
("Authorization for versions and aliases"; the Service Authorization Reference lists only the
`stateMachine` resource type for states:StartExecution), so the grant CDK writes for the machine covers every
version, the previous release's included.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks

_VERSION_ID = "Version"


def published_version_arn(machine: sfn.StateMachine) -> str:
    """The ARN (Ref) of the version `machine`'s current revision publishes; one version resource per
    machine, replaced (and the old one kept) whenever the revision changes."""
    version = machine.node.try_find_child(_VERSION_ID)
    if version is None:
        resource = machine.node.default_child
        assert isinstance(resource, sfn.CfnStateMachine)
        version = sfn.CfnStateMachineVersion(
            machine,
            _VERSION_ID,
            state_machine_arn=machine.state_machine_arn,
            state_machine_revision_id=resource.attr_state_machine_revision_id,
            description="Published by trainstack for the parent machines of this release",
        )
        version.apply_removal_policy(cdk.RemovalPolicy.RETAIN)
    assert isinstance(version, sfn.CfnStateMachineVersion)
    return version.ref


class PinnedStartExecution(tasks.StepFunctionsStartExecution):
    """states:startExecution of `state_machine`'s published version (grants as CDK writes them for the
    machine: StartExecution on its unqualified ARN, which authorizes every version)."""

    def __init__(self, scope, construct_id: str, *, state_machine: sfn.StateMachine, **props: Any) -> None:
        super().__init__(
            scope,
            construct_id,
            state_machine=state_machine,
            query_language=sfn.QueryLanguage.JSONATA,
            **props,
        )
        self._version_arn = published_version_arn(state_machine)

    def to_state_json(self, query_language=None):
        state = super().to_state_json(query_language)
        state["Arguments"]["StateMachineArn"] = self._version_arn
        return state
