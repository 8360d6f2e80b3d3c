"""`states:startExecution` tasks (child executions, e.g. `.sync:2`) as AWS runs them.

moto's copy of LocalStack's interpreter leaves out the casing LocalStack applies to these tasks:
`Input`/`StateMachineArn` never reach boto3 as `input`/`stateMachineArn` (the call fails), and results
keep boto3's `executionArn`/`output` where AWS answers `ExecutionArn`/`Output`. Both conversions use the
Step Functions API model. moto also checks a running child every 0.5 real seconds; the emulator's
clocks make children finish in milliseconds, so it checks far more often.
"""

from __future__ import annotations

from functools import cache
from typing import Any
from unittest import mock

import botocore.session

SYNC_CHECK_SECONDS = 0.005


@cache
def _model():
    return botocore.session.get_session().get_service_model("stepfunctions")


def patches() -> list[Any]:
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
        state_task_service_callback,
        state_task_service_sfn,
    )

    service = state_task_service_sfn.StateTaskServiceSfn
    original_parameters = service._normalise_parameters

    def operation(task, action: str | None):
        name = "".join(part.capitalize() for part in task._get_boto_service_action(action).split("_"))
        return _model().operation_model(name)

    def normalise_parameters(self, parameters, boto_service_name=None, service_action_name=None):
        original_parameters(self, parameters, boto_service_name, service_action_name)
        self._to_boto_request(parameters, operation(self, service_action_name).input_shape)

    def normalise_response(self, response, boto_service_name=None, service_action_name=None):
        self._from_boto_response(response, operation(self, service_action_name).output_shape)

    return [
        mock.patch.object(service, "_normalise_parameters", normalise_parameters),
        mock.patch.object(service, "_normalise_response", normalise_response),
        mock.patch.object(
            state_task_service_callback, "_DELAY_SECONDS_SYNC_CONDITION_CHECK", SYNC_CHECK_SECONDS
        ),
    ]
