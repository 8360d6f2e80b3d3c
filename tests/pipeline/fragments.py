"""A chain of states built alone (no app, no synth) as a definition the emulator runs."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_stepfunctions as sfn

from tests.pipeline.harness import ACCOUNT, REGION


def _joined(value: Any) -> Any:
    """CloudFormation's Fn::Join of the partition, done as CloudFormation would (partition `aws`)."""
    if isinstance(value, dict):
        if set(value) == {"Fn::Join"}:
            separator, parts = value["Fn::Join"]
            return separator.join("aws" if part == {"Ref": "AWS::Partition"} else part for part in parts)
        return {key: _joined(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_joined(item) for item in value]
    return value


def chain_definition(build: Callable[[cdk.Stack], sfn.IChainable]) -> str:
    """The JSONata definition of the chain `build(stack)` returns."""
    stack = cdk.Stack(cdk.App(), "Fragment", env=cdk.Environment(account=ACCOUNT, region=REGION))
    graph = sfn.StateGraph(build(stack).start_state, "fragment")
    definition = _joined(stack.resolve(graph.to_graph_json(sfn.QueryLanguage.JSONATA)))
    return json.dumps({"QueryLanguage": "JSONata", **definition})
