"""StartSyncExecution, which moto's Step Functions does not serve ("Not yet implemented"): a synchronous
Express execution run by moto's interpreter, answered when it ends.

What AWS documents and this follows (Step Functions API reference, StartSyncExecution; botocore's
stepfunctions model, StartSyncExecutionOutput): only for EXPRESS state machines (a STANDARD one is refused
with StateMachineTypeNotSupported); the call returns when the execution ends, with `status` SUCCEEDED,
FAILED or TIMED_OUT, `output` on success, `error` and `cause` otherwise, and the execution's ARN, name,
input and start and stop dates. Assumed: the execution ARN keeps moto's `execution:` form (AWS's Express
executions are `express:<machine>:<name>:<id>`); nothing here reads it.

The interpreter's aws-sdk tasks also learn CloudWatch Logs: Step Functions names the service
`cloudwatchlogs` in the task's Resource and `CloudWatchLogs` in its error names (Step Functions developer
guide, "AWS SDK service integrations", the supported services' table); boto3 names it `logs`.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any
from unittest import mock

# Wall-clock seconds to wait for one synchronous execution; a reader makes a few calls and waits nowhere.
_SYNC_TIMEOUT_SECONDS = 60.0
_POLL_SECONDS = 0.005


def patches() -> list[Any]:
    from moto import backend_index
    from moto.stepfunctions import urls
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
        state_task_service_aws_sdk as aws_sdk,
    )
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service import (
        StateTaskService,
    )
    from moto.stepfunctions.responses import StepFunctionResponse

    # botocore sends StartSyncExecution to `sync-states.<region>...` (the operation's endpoint hostPrefix).
    sync_host = r"https?://sync-states\.(.+)\.amazonaws.com"
    return [
        mock.patch.object(
            backend_index,
            "backend_url_patterns",
            [*backend_index.backend_url_patterns, ("stepfunctions", re.compile(sync_host))],
        ),
        mock.patch.object(urls, "url_bases", [*urls.url_bases, sync_host]),
        mock.patch.object(StepFunctionResponse, "start_sync_execution", _start_sync_execution, create=True),
        mock.patch.dict(StateTaskService._SERVICE_NAME_SFN_TO_BOTO_OVERRIDES, {"cloudwatchlogs": "logs"}),
        mock.patch.dict(aws_sdk._SERVICE_ERROR_NAMES, {"cloudwatchlogs": "CloudWatchLogs"}),
    ]


def _start_sync_execution(self) -> Any:
    from moto.core.responses import ActionResult

    arn = self._get_param("stateMachineArn")
    machine = self.stepfunction_backend.describe_state_machine(arn)
    if machine.type != "EXPRESS":
        raise _type_not_supported()()
    execution = self.stepfunction_backend.start_execution(
        arn, self._get_param("name") or str(uuid.uuid4()), self._get_param("input", if_none="{}")
    )
    deadline = time.monotonic() + _SYNC_TIMEOUT_SECONDS
    while execution.status == "RUNNING" and time.monotonic() < deadline:
        time.sleep(_POLL_SECONDS)
    ended = self.stepfunction_backend.describe_execution(execution.execution_arn)
    answer = {
        "executionArn": ended.execution_arn,
        "stateMachineArn": arn,
        "name": ended.name,
        "startDate": ended.start_date,
        "input": ended.execution_input,
        "status": ended.status if ended.status in ("SUCCEEDED", "FAILED", "TIMED_OUT") else "TIMED_OUT",
    }
    if ended.status != "RUNNING":
        answer["stopDate"] = ended.stop_date
    if ended.status == "SUCCEEDED":
        answer["output"] = ended.output if isinstance(ended.output, str) else _json(ended.output)
    for field in ("error", "cause"):
        if getattr(ended, field, None) is not None:
            answer[field] = getattr(ended, field)
    return ActionResult(answer)


def _json(value: Any) -> str:
    return json.dumps(value)


def _type_not_supported() -> type:
    from moto.core.exceptions import AWSError

    class TypeNotSupported(AWSError):
        TYPE = "StateMachineTypeNotSupported"
        STATUS = 400

        def __init__(self) -> None:
            super().__init__("This operation is not supported by this type of state machine")

    return TypeNotSupported
