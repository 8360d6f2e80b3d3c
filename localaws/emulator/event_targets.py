"""EventBridge rules whose target is a Step Functions state machine, which moto's EventBridge cannot send
to (its Rule.send_to_targets raises NotImplementedError for them, and S3's notification code swallows it).

Behaviour, from the EventBridge user guide ("Amazon EventBridge targets"; "Step Functions state machine"
target): for each matching event, EventBridge calls StartExecution on the state machine with the event
as the execution's input, under a name EventBridge chooses. Everything else (pattern matching, the other
target kinds, S3's "Object Created" events with EventBridge notifications on) stays moto's.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import boto3
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
                stateMachineArn=target["Arn"], name=str(uuid.uuid4()), input=json.dumps(event, default=str)
            )
        others = [target for target in self.targets if target not in machines]
        if others:
            kept, self.targets = self.targets, others
            try:
                send_to_targets(self, event, transform_input)
            finally:
                self.targets = kept

    monkeypatch.setattr(Rule, "send_to_targets", send)
