"""State machine definitions the emulator tests share."""

from __future__ import annotations

import json


def parent_of_child(child_arn: str, child_name: str, **arguments) -> str:
    """A JSONata machine whose one state starts `child_arn` as execution `child_name` with `.sync:2` and
    outputs the child's output; `arguments` add to the StartExecution request (Input, ...)."""
    return json.dumps(
        {
            "QueryLanguage": "JSONata",
            "StartAt": "Child",
            "States": {
                "Child": {
                    "Type": "Task",
                    "Resource": "arn:aws:states:::states:startExecution.sync:2",
                    "Arguments": {"StateMachineArn": child_arn, "Name": child_name, **arguments},
                    "Output": "{% $states.result.Output %}",
                    "End": True,
                }
            },
        }
    )
