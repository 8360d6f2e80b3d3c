"""Install FakeBatch behind moto, so boto3 clients and the state machine's aws-sdk:batch:* tasks reach it.

moto routes Batch's REST paths through `moto.batch.urls.url_paths` to BatchResponse, whose action is
the last path segment (`/v1/submitservicejob` -> `submitservicejob`). moto has no service-job paths:
this adds them and answers them from FakeBatch, with errors serialized as Batch's REST-JSON errors
(HTTP 400, `x-amzn-ErrorType: <code>`), so botocore raises ClientError with that code.

The PascalCase member names of aws-sdk tasks (Batch's API is camelCase) are localaws.emulator's
conversion, as for every service.
"""

from __future__ import annotations

import json
from typing import Any

from moto.batch import urls as batch_urls
from moto.batch.responses import BatchResponse
from moto.core.exceptions import ServiceException
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import state_task_service_aws_sdk

from localaws.emulator.fake_batch import FakeBatch

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


def _handler(fake: FakeBatch, method: str):
    def handle(self: BatchResponse) -> Any:
        request = json.loads(self.body or "{}")
        try:
            return json.dumps(getattr(fake, method)(request))
        except ServiceException as error:
            body = json.dumps({"__type": error.code, "message": error.message})
            return body, {"status": 400, "x-amzn-ErrorType": error.code, "content-type": "application/json"}

    return handle
