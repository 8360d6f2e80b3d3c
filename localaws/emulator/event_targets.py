"""EventBridge rules whose target is a Step Functions state machine, which moto's EventBridge cannot send
to (its Rule.send_to_targets raises NotImplementedError for them, and S3's notification code swallows it).

Behaviour, from the EventBridge user guide ("Amazon EventBridge targets"; "Step Functions state machine"
target): for each matching event, EventBridge calls StartExecution on the state machine, under a name
EventBridge chooses, with the target's input (PutTargets' Target in botocore's events model): `Input`, "valid
JSON text passed to the target. In this case, nothing from the event itself is passed"; `InputPath`, "the
value of the JSONPath that is used for extracting part of the matched event"; `InputTransformer` (API
reference, InputTransformer; user guide, "Amazon EventBridge input transformation"): each `<name>` of
InputPathsMap replaced by its value, a string as its text (so a template quotes it: `"s3://<bucket>/<key>"`)
and anything else as JSON, and the user guide's predefined variables: `<aws.events.rule-arn>`,
`<aws.events.rule-name>`, `<aws.events.event>` ("the original event payload as JSON (without the detail
field)") and `<aws.events.event.json>` (the whole event); else the whole event.

Where this fake fails loudly instead (none of it is used by the product's rules, whose state machine targets
take the whole event):
- a template that renders plain text ("<instance> is in state <status>" is valid EventBridge), since a state
  machine's execution input must be JSON (StartExecution, botocore's stepfunctions model): AWS would fail
  the invocation (retries, then the target's dead-letter queue);
- a path that matches nothing in the event (InputPath or an InputPathsMap entry): no source says what
  EventBridge passes then, so no value is made up for it;
- `<aws.events.event.ingestion-time>`: not emulated (moto's S3 events carry no time of AWS's form).
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

INGESTION_TIME = "<aws.events.event.ingestion-time>"


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
        return json.dumps(_first_match(target["InputPath"], event, rule), default=str)
    if "InputTransformer" in target:
        return rendered_template(target["InputTransformer"], event, rule)
    return json.dumps(event, default=str)


def rendered_template(transformer: dict[str, Any], event: dict[str, Any], rule: Rule) -> str:
    """An InputTransformer's InputTemplate with its variables filled in: JSON text for StartExecution."""
    values = {
        name: _first_match(path, event, rule) for name, path in transformer.get("InputPathsMap", {}).items()
    }
    values.update(
        {
            "aws.events.rule-arn": rule.arn,
            "aws.events.rule-name": rule.name,
            "aws.events.event": {key: value for key, value in event.items() if key != "detail"},
            "aws.events.event.json": event,
        }
    )
    text = transformer["InputTemplate"]
    for name, value in values.items():
        text = text.replace(f"<{name}>", value if isinstance(value, str) else json.dumps(value, default=str))
    if INGESTION_TIME in text:
        raise ValueError(f"rule {rule.name}: the emulator does not give {INGESTION_TIME} (module docstring)")
    try:
        json.loads(text)
    except json.JSONDecodeError:
        raise ValueError(
            f"rule {rule.name}: the input template renders {text!r}, which is not JSON; a state machine "
            "target takes JSON input only (StartExecution), so EventBridge cannot start the execution"
        ) from None
    return text


def _first_match(path: str, event: dict[str, Any], rule: Rule) -> Any:
    matches = parse_json_path(path).find(event)
    if not matches:
        raise ValueError(
            f"rule {rule.name}: the path {path} matches nothing in the event, and no AWS source says what "
            "EventBridge then passes to the target: use a path the event has"
        )
    return matches[0].value
