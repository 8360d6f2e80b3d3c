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
field)"), `<aws.events.event.json>` (the whole event) and `<aws.events.event.ingestion-time>` ("the time at
which the event was received by EventBridge. This is an ISO 8601 timestamp"); else the whole event.

The event as AWS writes it ("Amazon EventBridge events": `time` is an ISO 8601 timestamp, the guide's
examples `2015-11-11T21:29:54Z`): moto hands its rules the event with `time` in Unix seconds and, from
PutEvents, an `ingestion-time` field of its own; a state machine gets `time` in the examples' form and no
`ingestion-time` field, which AWS's events do not have. The ingestion time is moto's stamp where it made
one (PutEvents) and the event's own time for S3's notifications, which moto sends as it makes them; it is
written in the form of `time` (to the second, with `Z`): the guide names no precision for it, so that part
is assumed.

Where this fake fails loudly instead (none of it is used by the product's rules, whose state machine targets
take the whole event):
- a template that renders plain text ("<instance> is in state <status>" is valid EventBridge), since a state
  machine's execution input must be JSON (StartExecution, botocore's stepfunctions model): AWS would fail
  the invocation (retries, then the target's dead-letter queue);
- a path that matches nothing in the event (InputPath or an InputPathsMap entry): no source says what
  EventBridge passes then, so no value is made up for it.
Everything else (pattern matching, the other target kinds, S3's "Object Created" events with EventBridge
notifications on) stays moto's.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from jsonpath_ng.ext import parse as parse_json_path
from moto.core.utils import iso_8601_datetime_without_milliseconds, utcfromtimestamp
from moto.events.models import Rule
from moto.utilities.arns import parse_arn

from localaws import clients

MOTO_INGESTION_TIME = "ingestion-time"  # moto's field on PutEvents' events (moto/events/models.py)


def install_state_machine_targets(monkeypatch) -> None:
    """Rules start executions of their state machine targets for the rest of the test."""
    send_to_targets = Rule.send_to_targets

    def send(self: Rule, event: dict[str, Any], transform_input: bool = True) -> None:
        if not self.event_pattern.matches_event(event):
            return
        machines = [target for target in self.targets if parse_arn(target["Arn"]).service == "states"]
        received, as_aws_writes_it = aws_event(event)
        for target in machines:
            clients.client("stepfunctions", parse_arn(target["Arn"]).region).start_execution(
                stateMachineArn=target["Arn"],
                name=str(uuid.uuid4()),
                input=target_input(target, as_aws_writes_it, self, received),
            )
        others = [target for target in self.targets if target not in machines]
        if others:
            kept, self.targets = self.targets, others
            try:
                send_to_targets(self, event, transform_input)
            finally:
                self.targets = kept

    monkeypatch.setattr(Rule, "send_to_targets", send)


def aws_event(event: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(the ingestion time, the event as AWS writes it) for an event as moto hands it to a rule (module
    docstring); moto's own targets may have rewritten `time` already, so a string is kept."""
    as_aws_writes_it = {key: value for key, value in event.items() if key != MOTO_INGESTION_TIME}
    as_aws_writes_it["time"] = _iso(event["time"])
    return _iso(event.get(MOTO_INGESTION_TIME, event["time"])), as_aws_writes_it


def _iso(moment: float | str) -> str:
    return (
        moment
        if isinstance(moment, str)
        else iso_8601_datetime_without_milliseconds(utcfromtimestamp(moment))
    )


def target_input(target: dict[str, Any], event: dict[str, Any], rule: Rule, received: str) -> str:
    """The execution input EventBridge passes a state machine target for `event`, received at `received`
    (module docstring)."""
    if "Input" in target:
        return target["Input"]
    if "InputPath" in target:
        return json.dumps(_first_match(target["InputPath"], event, rule), default=str)
    if "InputTransformer" in target:
        return rendered_template(target["InputTransformer"], event, rule, received)
    return json.dumps(event, default=str)


def rendered_template(transformer: dict[str, Any], event: dict[str, Any], rule: Rule, received: str) -> str:
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
            "aws.events.event.ingestion-time": received,
        }
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


def _first_match(path: str, event: dict[str, Any], rule: Rule) -> Any:
    matches = parse_json_path(path).find(event)
    if not matches:
        raise ValueError(
            f"rule {rule.name}: the path {path} matches nothing in the event, and no AWS source says what "
            "EventBridge then passes to the target: use a path the event has"
        )
    return matches[0].value
