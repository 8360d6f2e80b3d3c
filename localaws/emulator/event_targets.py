"""EventBridge rules whose target is a Step Functions state machine, which moto's EventBridge cannot send
to (its Rule.send_to_targets raises NotImplementedError for them, and S3's notification code swallows it).

Behaviour, from the EventBridge user guide ("Amazon EventBridge targets"; "Step Functions state machine"
target): for each matching event, EventBridge calls StartExecution on the state machine, under a name
EventBridge chooses, with the target's input (PutTargets' Target in botocore's events model): `Input`, "valid
JSON text passed to the target. In this case, nothing from the event itself is passed"; `InputPath`, "the
value of the JSONPath that is used for extracting part of the matched event" (a path that matches nothing:
`null`, assumed, no source says); `InputTransformer` (API reference, InputTransformer; user guide, "Amazon
EventBridge input transformation"): each `<name>` of InputPathsMap, and the predefined
`<aws.events.rule-arn>`, `<aws.events.rule-name>` and `<aws.events.event>`, replaced by its value, a string
as its text (so a template quotes it: `"s3://<bucket>/<key>"`) and anything else as JSON; a template may be
plain text ("<instance> is in state <status>"), but a state machine's execution input must be JSON
(StartExecution, botocore's stepfunctions model), so such a rendering fails loudly here, where AWS would
fail the invocation (retries, then the target's dead-letter queue); else the whole event.
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
                stateMachineArn=target["Arn"], name=str(uuid.uuid4()), input=target_input(target, event, self)
            )
        others = [target for target in self.targets if target not in machines]
        if others:
            kept, self.targets = self.targets, others
            try:
                send_to_targets(self, event, transform_input)
            finally:
                self.targets = kept

    monkeypatch.setattr(Rule, "send_to_targets", send)


def target_input(target: dict[str, Any], event: dict[str, Any], rule: Rule) -> str:
    """The execution input EventBridge passes a state machine target for `event` (module docstring)."""
    if "Input" in target:
        return target["Input"]
    if "InputPath" in target:
        return json.dumps(_first_match(target["InputPath"], event), default=str)
    if "InputTransformer" in target:
        return rendered_template(target["InputTransformer"], event, rule)
    return json.dumps(event, default=str)


def rendered_template(transformer: dict[str, Any], event: dict[str, Any], rule: Rule) -> str:
    """An InputTransformer's InputTemplate with its variables filled in: JSON text for StartExecution."""
    values = {name: _first_match(path, event) for name, path in transformer.get("InputPathsMap", {}).items()}
    values.update(
        {"aws.events.rule-arn": rule.arn, "aws.events.rule-name": rule.name, "aws.events.event": event}
    )
    text = transformer["InputTemplate"]
    for name, value in values.items():
        text = text.replace(f"<{name}>", value if isinstance(value, str) else json.dumps(value, default=str))
    try:
        json.loads(text)
    except json.JSONDecodeError:
        raise ValueError(
            f"rule {rule.name}: the input template renders {text!r}, which is not JSON; a state machine "
            "target takes JSON input only (StartExecution), so EventBridge cannot start the execution"
        ) from None
    return text


def _first_match(path: str, event: dict[str, Any]) -> Any:
    matches = parse_json_path(path).find(event)
    return matches[0].value if matches else None
