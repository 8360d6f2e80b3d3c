"""Acknowledge cdk-nag's IAM5 (wildcard) findings of a role statement by statement, with a reason each.

cdk-nag names each finding after the resource exactly as the deployed template shows it, e.g.
`AwsSolutions-IAM5[Resource::{"Fn::GetStackOutput":{...}}/run-*]` for a bucket of another stack; those
references only exist once the app is prepared. A construct validation runs after that and before the
validation plugins, so it can read each statement's resolved resources and acknowledge exactly the
findings of the statements it was given a reason for (findings of other statements stay errors).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_iam as iam
from constructs import IValidation

from stacks.validation import acknowledge


def flatten_reference(node: Any) -> str:
    """cdk-nag's flattenCfnReference: how a resource appears in a finding's id."""
    if node is None:
        return ""
    if isinstance(node, str):
        return node.replace("${", "<").replace("}", ">")
    if isinstance(node, dict) and "Fn::Join" in node:
        delimiter, items = node["Fn::Join"]
        return delimiter.join(flatten_reference(item) for item in items)
    if isinstance(node, dict) and "Fn::Sub" in node:
        return flatten_reference(node["Fn::Sub"])
    if isinstance(node, dict) and "Fn::GetAtt" in node:
        resource, attribute = node["Fn::GetAtt"]
        return f"<{flatten_reference(resource)}.{flatten_reference(attribute)}>"
    if isinstance(node, dict) and "Fn::ImportValue" in node:
        return flatten_reference(node["Fn::ImportValue"])
    if isinstance(node, dict) and "Ref" in node:
        return f"<{flatten_reference(node['Ref'])}>"
    return json.dumps(node, separators=(",", ":"))


@jsii.implements(IValidation)
class _AcknowledgeWildcards:
    def __init__(self, role: iam.Role | iam.ManagedPolicy, reasons: Mapping[str, str]) -> None:
        self._role = role
        self._reasons = dict(reasons)

    def validate(self) -> list[str]:
        # A managed policy holds its statements itself; a role in its default policy.
        policy = (
            self._role
            if isinstance(self._role, iam.ManagedPolicy)
            else self._role.node.try_find_child("DefaultPolicy")
        )
        if policy is None:
            return []
        document = cdk.Stack.of(self._role).resolve(policy.document)
        errors = []
        matched: set[str] = set()
        for statement in document.get("Statement", []):
            actions = statement.get("Action", [])
            keys = [statement.get("Sid"), *(actions if isinstance(actions, list) else [actions])]
            sid = next((key for key in keys if key in self._reasons), None)
            matched.update(key for key in keys if key in self._reasons)
            resources = statement.get("Resource", [])
            wildcards = [
                flatten_reference(resource)
                for resource in (resources if isinstance(resources, list) else [resources])
                if "*" in flatten_reference(resource)
            ]
            if not wildcards:
                continue
            if sid not in self._reasons:
                continue
            for resource in wildcards:
                acknowledge(policy, f"AwsSolutions-IAM5[Resource::{resource}]", self._reasons[sid])
        missing = sorted(set(self._reasons) - matched)
        if missing:
            errors.append(f"no statement with Sid or action {', '.join(missing)} in {self._role.node.path}")
        return errors


def acknowledge_wildcard_statements(role: iam.Role | iam.ManagedPolicy, reasons: Mapping[str, str]) -> None:
    """`reasons`: statement Sid (or one of its actions, for statements the constructs write) -> why its
    wildcard resources are as narrow as they can be."""
    role.node.add_validation(_AcknowledgeWildcards(role, reasons))
