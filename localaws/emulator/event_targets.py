"""EventBridge rules whose target is a Step Functions state machine, which moto's EventBridge cannot send
to (its Rule.send_to_targets raises NotImplementedError for them, and S3's notification code swallows it).

Behaviour, from the EventBridge user guide ("Amazon EventBridge targets"; "Step Functions state machine"
target): for each matching event, EventBridge calls StartExecution on the state machine, under a name
EventBridge chooses, with the target's input (PutTargets' Target in botocore's events model): `Input`, "valid
JSON text passed to the target. In this case, nothing from the event itself is passed"; `InputPath`, "the
value of the JSONPath that is used for extracting part of the matched event"; `InputTransformer`, rendered
by moto's own EventTemplateParser (as moto renders it for its other targets); else the whole event.
Everything else (pattern matching, the other target kinds, S3's "Object Created" events with EventBridge
notifications on) stays moto's.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import boto3
from jsonpath_ng.ext import parse as parse_json_path
from moto.events.models import Rule
from moto.events.utils import EventTemplateParser
from moto.utilities.arns import parse_arn


def install_state_machine_targets(monkeypatch) -> None:
    """Rules start executions of their state machine targets for the rest of the test."""
    send_to_targets = Rule.send_to_targets

    def send(self: Rule, event: dict[str, Any], transform_input: bool = True) -> None:
        if not self.event_pattern.matches_event(event):
            return
        machines = [target for target in self.targets if parse_arn(target["Arn"]).service == "states"]
        for target in machines:
            region = parse_arn(target["Arn"]).region
            boto3.client("stepfunctions", region_name=region).start_execution(
                stateMachineArn=target["Arn"], name=str(uuid.uuid4()), input=target_input(target, event)
            )
        others = [target for target in self.targets if target not in machines]
        if others:
            kept, self.targets = self.targets, others
            try:
                send_to_targets(self, event, transform_input)
            finally:
                self.targets = kept

    monkeypatch.setattr(Rule, "send_to_targets", send)


def target_input(target: dict[str, Any], event: dict[str, Any]) -> str:
    """The execution input EventBridge passes a state machine target for `event` (module docstring)."""
    if "Input" in target:
        return target["Input"]
    if "InputPath" in target:
        matches = parse_json_path(target["InputPath"]).find(event)
        return json.dumps(matches[0].value if matches else None, default=str)
    if "InputTransformer" in target:
        transformer = target["InputTransformer"]
        rendered = EventTemplateParser.parse(
            input_template=transformer.get("InputTemplate"),
            input_paths_map=transformer.get("InputPathsMap", {}),
            event=event,
        )
        return json.dumps(rendered, default=str)
    return json.dumps(event, default=str)
