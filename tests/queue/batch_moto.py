"""Install FakeBatch behind moto, so boto3 clients and the state machine's aws-sdk:batch:* tasks reach it.

moto routes Batch's REST paths through `moto.batch.urls.url_paths` to BatchResponse, whose action is
the last path segment (`/v1/submitservicejob` -> `submitservicejob`). moto has no service-job paths:
this adds them and answers them from FakeBatch, with errors serialized as Batch's REST-JSON errors
(HTTP 400, `x-amzn-ErrorType: <code>`), so botocore raises ClientError with that code.

Step Functions writes aws-sdk parameters in PascalCase even where the API is camelCase, as Batch's is
("Parameters in Step Functions are expressed in PascalCase, even if the native service API is in
camelCase", Step Functions developer guide), and returns results PascalCase too (LocalStack's
interpreter does so). moto's copy of that interpreter passes names through unchanged; this converts
them along botocore's shapes. (Stopgap until trainstack.emulator does the same for every session.)
"""

from __future__ import annotations

import json
from typing import Any

import botocore.session
from moto.batch import urls as batch_urls
from moto.batch.responses import BatchResponse
from moto.core.exceptions import ServiceException
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import state_task_service_aws_sdk

from tests.queue.fake_batch import FakeBatch

# REST path segment -> FakeBatch method.
SERVICE_JOB_PATHS = {
    "submitservicejob": "submit",
    "describeservicejob": "describe",
    "listservicejobs": "list",
    "terminateservicejob": "terminate",
    "getjobqueuesnapshot": "queue_snapshot",
}


def install_fake_batch(fake: FakeBatch, monkeypatch) -> None:
    """Route the four service-job APIs to `fake` for the rest of the test (monkeypatch undoes it)."""
    for path, method in SERVICE_JOB_PATHS.items():
        monkeypatch.setitem(batch_urls.url_paths, f"{{0}}/v1/{path}$", BatchResponse.dispatch)
        monkeypatch.setattr(BatchResponse, path, _handler(fake, method), raising=False)
    # The interpreter names aws-sdk errors "<Service>.<Code>"; AWS spells this service "Batch".
    monkeypatch.setitem(state_task_service_aws_sdk._SERVICE_ERROR_NAMES, "batch", "Batch")
    task = state_task_service_aws_sdk.StateTaskServiceAwsSdk
    monkeypatch.setattr(task, "_normalise_parameters", _in_model_names, raising=False)
    monkeypatch.setattr(task, "_normalise_response", _in_pascal_names, raising=False)


def _operation(task):
    model = botocore.session.get_session().get_service_model(task._get_boto_service_name())
    action = task.resource.api_action
    return model.operation_model(action[0].upper() + action[1:])


def _in_model_names(self, parameters: dict, *args, **kwargs) -> None:
    converted = _names(
        parameters, _operation(self).input_shape, lambda key, members: members.get(key.lower(), key)
    )
    parameters.clear()
    parameters.update(converted)


def _in_pascal_names(self, response, *args, **kwargs) -> None:
    if isinstance(response, dict):
        converted = _names(response, _operation(self).output_shape, lambda key, _: key[:1].upper() + key[1:])
        response.clear()
        response.update(converted)


def _names(value, shape, rename):
    """Rename structure members along the shapes (model names <-> PascalCase); map keys stay."""
    if shape is None:
        return value
    if shape.type_name == "structure" and isinstance(value, dict):
        members = {name.lower(): name for name in shape.members}
        return {
            rename(key, members): _names(item, shape.members.get(members.get(key.lower(), key)), rename)
            for key, item in value.items()
        }
    if shape.type_name == "list" and isinstance(value, list):
        return [_names(item, shape.member, rename) for item in value]
    if shape.type_name == "map" and isinstance(value, dict):
        return {key: _names(item, shape.value, rename) for key, item in value.items()}
    return value


def _handler(fake: FakeBatch, method: str):
    def handle(self: BatchResponse) -> Any:
        request = json.loads(self.body or "{}")
        try:
            return json.dumps(getattr(fake, method)(request))
        except ServiceException as error:
            body = json.dumps({"__type": error.code, "message": error.message})
            return body, {"status": 400, "x-amzn-ErrorType": error.code, "content-type": "application/json"}

    return handle
