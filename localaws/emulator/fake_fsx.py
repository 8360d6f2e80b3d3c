"""FSx for Lustre data repository tasks (moto's FSx has none): CreateDataRepositoryTask,
DescribeDataRepositoryTasks and CancelDataRepositoryTask, for the retrain trigger's tests and demo.

Sources: botocore's `fsx` service model (operations, shapes, the documentation strings quoted here);
requests are validated against it, as botocore's client-side validation would, plus what the model's
documentation states:
- "A CreateDataRepositoryTask operation will fail if a data repository is not linked to the FSx file
  system" (FileSystemNotFound for an unknown file system id here);
- an import task's Paths are "paths in the Amazon S3 bucket ... in the format s3://bucket-name/prefix";
- Lifecycle PENDING, EXECUTING, then SUCCEEDED, FAILED ("there may be files the task failed to process";
  FailureDetails.Message), CANCELING, CANCELED; a report is delivered to `{path}/task-{id}/failures.csv`;
- DataRepositoryTaskExecuting: "An existing data repository task is currently executing on the file
  system. Wait until the existing task has completed, then create the new task."
- a completion report's Path "must be within the Amazon S3 location that the file system is linked to":
  the DataRepositoryPath of one of its data repository associations, or the ExportPath of a file system
  created with an ImportPath (CompletionReport.Path, botocore 1.44.8), whose default is
  `s3://import-bucket/FSxLustre[creation-timestamp]` (CreateFileSystemLustreConfiguration.ExportPath).
  The fake reads each file system's links from the synthesized storage template (`links_in_template`): the
  dataset association and the checkpoint association (stacks/storage/file_system_links.py);
- an import task's Paths: "If a path that you provide isn't valid, the task fails" (CreateDataRepositoryTask
  Paths): a path within none of the links makes the task end FAILED.
Assumed (no AWS source): that a report outside the links is refused with BadRequest (the model's error for a
request that is invalid; the trigger ends DatasetImportFailed on any error), that an import path outside
them is accepted and the task then fails (rather than refused at once: both end DatasetImportFailed), its
failure message, the task id form (`task-` +
17 hex digits, as FSx's other ids), how long a task takes (the script's `seconds`, on the emulator's
clock), the failure message text (the script's), and that a canceled task ends CANCELED at once.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import botocore.session
from botocore.exceptions import ParamValidationError
from botocore.validate import validate_parameters
from moto.core.exceptions import ServiceException
from moto.fsx.responses import FSxResponse
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import state_task_service_aws_sdk

ENDED = ("SUCCEEDED", "FAILED", "CANCELED")


@dataclass(frozen=True)
class ImportScript:
    """How the next task goes: ends `outcome` (SUCCEEDED, FAILED, or None: never ends) after `seconds`."""

    outcome: str | None = "SUCCEEDED"
    seconds: float = 120
    message: str = ""


@dataclass
class FakeFsx:
    """`links`: each file system's linked S3 locations (association DataRepositoryPaths, or the ExportPath of
    an ImportPath link); `scripts`: one per task created, in order; when they run out, tasks succeed after
    120 s."""

    links: Mapping[str, Sequence[str]]
    now: Callable[[], float] = time.time  # the emulator's clock, once trigger_world sets it
    scripts: list[ImportScript] = field(default_factory=list)
    tasks: list[dict[str, Any]] = field(default_factory=list)
    _ends: dict[str, tuple[float, ImportScript]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def create(self, request: dict[str, Any]) -> dict[str, Any]:
        _validate("CreateDataRepositoryTask", request)
        if request["FileSystemId"] not in self.links:
            raise ServiceException(
                "FileSystemNotFound", f"File system '{request['FileSystemId']}' does not exist."
            )
        linked = self.links[request["FileSystemId"]]
        _check_report(request["Report"], linked)
        with self._lock:
            for task in self.tasks:
                self._advance(task)
                if task["FileSystemId"] == request["FileSystemId"] and task["Lifecycle"] not in ENDED:
                    raise ServiceException(
                        "DataRepositoryTaskExecuting",
                        "An existing data repository task is currently executing on the file system.",
                    )
            script = self.scripts.pop(0) if self.scripts else ImportScript()
            if outside := _outside(request, linked):
                # "If a path that you provide isn't valid, the task fails" (CreateDataRepositoryTask Paths).
                script = ImportScript(
                    "FAILED",
                    script.seconds,
                    f"The path {outside} is not linked to the file system by a data repository association.",
                )
            task_id = "task-" + uuid.uuid4().hex[:17]
            task = {
                "TaskId": task_id,
                "Lifecycle": "PENDING",
                "Type": request["Type"],
                "CreationTime": self.now(),
                "FileSystemId": request["FileSystemId"],
                "Paths": request.get("Paths", []),
                "Report": request["Report"],
            }
            self.tasks.append(task)
            self._ends[task_id] = (self.now() + script.seconds, script)
            return {"DataRepositoryTask": dict(task)}

    def describe(self, request: dict[str, Any]) -> dict[str, Any]:
        _validate("DescribeDataRepositoryTasks", request)
        wanted = set(request.get("TaskIds", []))
        with self._lock:
            found = [self._advance(task) for task in self.tasks if not wanted or task["TaskId"] in wanted]
        if wanted - {task["TaskId"] for task in found}:
            raise ServiceException(
                "DataRepositoryTaskNotFound", f"Data repository task {sorted(wanted)} not found."
            )
        return {"DataRepositoryTasks": [dict(task) for task in found]}

    def cancel(self, request: dict[str, Any]) -> dict[str, Any]:
        _validate("CancelDataRepositoryTask", request)
        with self._lock:
            task = next((task for task in self.tasks if task["TaskId"] == request["TaskId"]), None)
            if task is None:
                raise ServiceException("DataRepositoryTaskNotFound", f"{request['TaskId']} not found.")
            if self._advance(task)["Lifecycle"] in ENDED:
                raise ServiceException("DataRepositoryTaskEnded", f"{request['TaskId']} has already ended.")
            task["Lifecycle"] = "CANCELED"
            return {"Lifecycle": "CANCELED", "TaskId": task["TaskId"]}

    def _advance(self, task: dict[str, Any]) -> dict[str, Any]:
        if task["Lifecycle"] in ENDED:
            return task
        end, script = self._ends[task["TaskId"]]
        if script.outcome is None or self.now() < end:
            task["Lifecycle"] = "EXECUTING"
            return task
        task["Lifecycle"] = script.outcome
        task["EndTime"] = end
        if script.outcome == "FAILED":
            task["FailureDetails"] = {"Message": script.message}
        return task


def _check_report(report: dict[str, Any], linked: Sequence[str]) -> None:
    path = report.get("Path")
    if report["Enabled"] and not any(_within(path or "", location) for location in linked):
        raise ServiceException(
            "BadRequest",
            f"The report path {path} must be within the S3 location the file system is linked to "
            f"({', '.join(linked) or 'none'}).",
        )


def _outside(request: dict[str, Any], linked: Sequence[str]) -> str | None:
    """An import task's first S3 path that lies within none of the file system's links."""
    if request["Type"] != "IMPORT_METADATA_FROM_REPOSITORY":
        return None
    return next(
        (
            path
            for path in request.get("Paths", [])
            if not any(_within(path, location) for location in linked)
        ),
        None,
    )


def _within(path: str, location: str) -> bool:
    # s3://bucket/myPrefix/reports is within s3://bucket/myPrefix; s3://bucket/reports is not (botocore).
    location = location.rstrip("/")
    return path == location or path.startswith(location + "/")


def links_in_template(
    template: dict[str, Any], *, buckets: Mapping[str, str], file_system_id: str
) -> dict[str, tuple[str, ...]]:
    """The storage template's file system (it has at most one), as `file_system_id`, with the S3 locations it
    is linked to. `buckets`: construct id (DatasetBucket, CheckpointBucket) -> the name the bucket has here;
    a bucket's logical id is its construct id and CDK's hash."""
    resources = template["Resources"]
    refs = {
        name: file_system_id for name, body in resources.items() if body["Type"] == "AWS::FSx::FileSystem"
    }
    refs.update(
        {
            name: bucket
            for name, body in resources.items()
            for construct_id, bucket in buckets.items()
            if body["Type"] == "AWS::S3::Bucket" and name.startswith(construct_id)
        }
    )
    linked = []
    for body in resources.values():
        properties = body.get("Properties", {})
        lustre = properties.get("LustreConfiguration", {})
        if body["Type"] == "AWS::FSx::FileSystem" and "ImportPath" in lustre:
            import_path = _resolved(lustre["ImportPath"], refs)
            linked.append(
                _resolved(lustre["ExportPath"], refs)
                if "ExportPath" in lustre
                else _default_export(import_path)
            )
        if body["Type"] == "AWS::FSx::DataRepositoryAssociation":
            linked.append(_resolved(properties["DataRepositoryPath"], refs))
    has_file_system = file_system_id in refs.values()
    return {file_system_id: tuple(linked)} if has_file_system else {}


def _default_export(import_path: str) -> str:
    bucket = import_path.removeprefix("s3://").split("/")[0]
    return f"s3://{bucket}/FSxLustre20261203T000000Z"  # a creation time; FSx writes its own


def _resolved(value: Any, refs: Mapping[str, str]) -> str:
    """A template value of strings, Ref and Fn::Join, with `refs` for the Refs."""
    if isinstance(value, str):
        return value
    if "Ref" in value:
        return refs[value["Ref"]]
    separator, parts = value["Fn::Join"]
    return separator.join(_resolved(part, refs) for part in parts)


def _validate(operation: str, request: dict[str, Any]) -> None:
    shape = botocore.session.get_session().get_service_model("fsx").operation_model(operation).input_shape
    try:
        validate_parameters(request, shape)
    except ParamValidationError as error:
        raise ServiceException("BadRequest", str(error)) from error


ROUTES = {
    "create_data_repository_task": "create",
    "describe_data_repository_tasks": "describe",
    "cancel_data_repository_task": "cancel",
}


def install_fake_fsx(fake: FakeFsx, monkeypatch) -> None:
    """Answer the three task APIs from `fake` (moto's FSx keeps the rest) for the rest of the test."""
    for action, method in ROUTES.items():
        monkeypatch.setattr(FSxResponse, action, _handler(fake, method), raising=False)
    # Assumed: Step Functions names FSx errors "FSx.<Code>Exception" (the SDK for Java v2's FSxClient).
    monkeypatch.setitem(state_task_service_aws_sdk._SERVICE_ERROR_NAMES, "fsx", "FSx")


def _handler(fake: FakeFsx, method: str):
    def handle(self: FSxResponse) -> Any:
        request = json.loads(self.body or "{}")
        try:
            return json.dumps(getattr(fake, method)(request))
        except ServiceException as error:
            body = json.dumps({"__type": error.code, "message": error.message})
            return body, {
                "status": 400,
                "x-amzn-ErrorType": error.code,
                "content-type": "application/x-amz-json-1.1",
            }

    return handle
