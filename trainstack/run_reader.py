"""The CLI's side of a team's run reader (`<namespace>-run-reader`, stacks/pipeline/run_reader.py).

With teams, a member holds only the team's start policy: no grant on `/aws/sagemaker/TrainingJobs`, on
Batch's service jobs, or on the training jobs Batch names. The commands that follow runs (`status`, `watch`,
`logs`, `report`, `runs`) then read through the team's reader, an Express state machine started with
StartSyncExecution, which answers only about the team's own runs. `reader_clients` gives them stand-ins for
the SageMaker, CloudWatch Logs and Batch clients with the few calls they make, answering as boto3 does
(camelCase members, datetimes), so the commands' code is the same with and without teams.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import botocore.session
from botocore.exceptions import ClientError

from trainstack.runs import RunError

NOT_THE_TEAMS_RUN = "NotTheTeamsRun"
UNKNOWN_CALL = "UnknownCall"
CALLS = (
    "describeTrainingJob",
    "filterLogEvents",
    "listTrainingJobs",
    "listServiceJobs",
    "describeServiceJob",
    "getJobQueueSnapshot",
)
# Events per FilterLogEvents page: an Express execution's output holds at most 256 KiB (Step Functions
# quotas), so 100 lines of up to ~2.5 KB each; a page over it is asked again with half the limit.
LOG_PAGE_LIMIT = 100
SERVICE_JOB_PAGE_LIMIT = 50
DATA_LIMIT_ERROR = "States.DataLimitExceeded"
# The aws-sdk integration's error names: `<Service>.<Code>` (Step Functions developer guide, "AWS SDK
# service integrations").
_SERVICE_ERRORS = {"SageMaker": "sagemaker", "CloudWatchLogs": "logs", "Batch": "batch"}


def run_reader_name(namespace: str) -> str:
    return f"{namespace}-run-reader"


def run_reader_arn(pipeline_arn: str, namespace: str) -> str:
    """The reader beside the pipeline `arn:...:stateMachine:<namespace>-pipeline`."""
    return f"{pipeline_arn.rsplit(':', 1)[0]}:{run_reader_name(namespace)}"


class RunReader:
    """StartSyncExecution of the team's reader: one call's answer, as boto3 would return it."""

    def __init__(self, stepfunctions: Any, state_machine_arn: str) -> None:
        self._stepfunctions = stepfunctions
        self.state_machine_arn = state_machine_arn

    def call(self, call: str, service: str, operation: str, **arguments: Any) -> dict[str, Any]:
        answer = self._stepfunctions.start_sync_execution(
            stateMachineArn=self.state_machine_arn,
            input=json.dumps({"call": call, **{k: v for k, v in arguments.items() if v is not None}}),
        )
        if answer["status"] == "SUCCEEDED":
            shape = botocore.session.get_session().get_service_model(service).operation_model(operation)
            return from_step_functions(shape.output_shape, json.loads(answer.get("output") or "{}"))
        error, cause = answer.get("error", answer["status"]), answer.get("cause", "")
        if error == NOT_THE_TEAMS_RUN:
            raise RunError(cause)
        prefix, _, code = error.partition(".")
        if _SERVICE_ERRORS.get(prefix) == service:
            raise ClientError({"Error": {"Code": code, "Message": cause}}, operation)
        raise RunError(
            f"the team's run reader {self.state_machine_arn} failed: {error}: {cause}".rstrip(": ")
        )


def from_step_functions(shape: Any, value: Any) -> Any:
    """An aws-sdk task's result (PascalCase members, timestamps as text) as boto3 returns it."""
    if value is None or shape is None:
        return value
    if shape.type_name == "structure" and isinstance(value, dict):
        converted = {}
        for name, member in shape.members.items():
            for key in (name[:1].upper() + name[1:], name):
                if key in value:
                    converted[name] = from_step_functions(member, value[key])
                    break
        return converted
    if shape.type_name == "list" and isinstance(value, list):
        return [from_step_functions(shape.member, item) for item in value]
    if shape.type_name == "map" and isinstance(value, dict):
        return {key: from_step_functions(shape.value, item) for key, item in value.items()}
    if shape.type_name == "timestamp":
        if isinstance(value, int | float):
            return datetime.fromtimestamp(value, UTC)
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return value


class _Pages:
    def __init__(self, pages) -> None:
        self._pages = pages

    def paginate(self, **arguments: Any) -> Iterator[dict[str, Any]]:
        return self._pages(**arguments)


class ReaderSageMaker:
    """DescribeTrainingJob and ListTrainingJobs of the team's jobs."""

    def __init__(self, reader: RunReader, exceptions: Any) -> None:
        self._reader = reader
        self.exceptions = exceptions

    def describe_training_job(self, TrainingJobName: str) -> dict[str, Any]:  # noqa: N803 (boto3's name)
        return self._reader.call(
            "describeTrainingJob", "sagemaker", "DescribeTrainingJob", jobName=TrainingJobName
        )

    def list_training_jobs(self, NameContains: str, **_: Any) -> dict[str, Any]:  # noqa: N803
        """The run's own jobs (`<NameContains>-*`), newest first: the reader's one listing."""
        return self._reader.call("listTrainingJobs", "sagemaker", "ListTrainingJobs", runName=NameContains)


class ReaderLogs:
    """FilterLogEvents of one of the team's jobs (`logStreamNamePrefix` = `<job>/`)."""

    def __init__(self, reader: RunReader) -> None:
        self._reader = reader

    def get_paginator(self, operation: str) -> _Pages:
        if operation != "filter_log_events":
            raise ValueError(f"the run reader does not page {operation}")
        return _Pages(self._log_pages)

    def _log_pages(self, logStreamNamePrefix: str, startTime: int | None = None, **_: Any):  # noqa: N803
        token, limit = None, LOG_PAGE_LIMIT
        while True:
            try:
                page = self._reader.call(
                    "filterLogEvents",
                    "logs",
                    "FilterLogEvents",
                    jobName=logStreamNamePrefix.removesuffix("/"),
                    nextToken=token,
                    startTime=startTime,
                    limit=limit,
                )
            except RunError as error:
                if DATA_LIMIT_ERROR not in str(error) or limit == 1:
                    raise
                limit //= 2
                continue
            yield page
            token = page.get("nextToken")
            if not token:
                return


class ReaderBatch:
    """The team's service jobs (its share's) and their places in the queue."""

    def __init__(self, reader: RunReader, exceptions: Any) -> None:
        self._reader = reader
        self.exceptions = exceptions
        self._listed_arns: set[str] = set()  # the team's service jobs listed so far

    def get_paginator(self, operation: str) -> _Pages:
        if operation != "list_service_jobs":
            raise ValueError(f"the run reader does not page {operation}")
        return _Pages(self._service_job_pages)

    def _service_job_pages(self, filters: list[dict[str, Any]], **_: Any):
        """Pages of ListServiceJobs of one JOB_NAME filter `<prefix>*`, the team's share's jobs only."""
        [name_filter] = [given for given in filters if given["name"] == "JOB_NAME"]
        [value] = name_filter["values"]
        token = None
        while True:
            page = self._reader.call(
                "listServiceJobs", "batch", "ListServiceJobs", prefix=value.removesuffix("*"), nextToken=token
            )
            self._listed_arns.update(summary["jobArn"] for summary in page.get("jobSummaryList", []))
            yield page
            token = page.get("nextToken")
            if not token:
                return

    def describe_service_job(self, jobId: str) -> dict[str, Any]:  # noqa: N803
        return self._reader.call("describeServiceJob", "batch", "DescribeServiceJob", jobId=jobId)

    def get_job_queue_snapshot(self, jobQueue: str) -> dict[str, Any]:  # noqa: N803 (boto3's name)
        """The front of the queue, the ARNs of all but the team's jobs listed so far blanked."""
        return self._reader.call(
            "getJobQueueSnapshot", "batch", "GetJobQueueSnapshot", jobArns=sorted(self._listed_arns)
        )
