"""FSx caught up before training: an IMPORT_METADATA_FROM_REPOSITORY data repository task for the trigger's
prefix, followed until it ends or the timeout passes.

FSx API (botocore's fsx model, CreateDataRepositoryTask / DescribeDataRepositoryTasks): an import task's
Paths are S3 paths `s3://bucket/prefix`; its Lifecycle goes PENDING, EXECUTING, then SUCCEEDED, FAILED or
CANCELED, with FailureDetails.Message when FAILED; a report (Format REPORT_CSV_20191124, Scope
FAILED_FILES_ONLY, the only values the model allows) is delivered to `{path}/task-{id}/failures.csv`, and
its path must lie within the file system's link, the data repository association's DataRepositoryPath
(CompletionReport.Path; the storage stack links the dataset prefix so on both deployment types);
creating a task while another runs on the file system fails with DataRepositoryTaskExecuting.
Assumed: Step Functions names FSx errors `FSx.<Code>Exception` (the AWS SDK for Java v2 client is FSxClient).

Errors the run ends with: DatasetImportFailed (the task failed, was canceled, could not start or could
not be followed; the cause names the report) and DatasetImportTimedOut (still running after
fsx_import_timeout_minutes; it is canceled).
"""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.pipeline.jsonata_text import expression, literal

ERROR_IMPORT_FAILED = "DatasetImportFailed"
ERROR_IMPORT_TIMED_OUT = "DatasetImportTimedOut"
TASK_EXECUTING = "FSx.DataRepositoryTaskExecutingException"
FSX_TRANSIENT_ERRORS = ("FSx.InternalServerErrorException", "FSx.FSxException")
POLL_SECONDS = 60
_REPORT = (
    '$importTask.Report.Path & "/" & ($substring($importTask.TaskId, 0, 5) = "task-" ? "" : "task-") '
    '& $importTask.TaskId & "/failures.csv"'
)


def failure(error: str, cause: str) -> str:
    """JSONata: the $failure value a failed step assigns (error name, cause)."""
    return f'{{"error": {literal(error)}, "cause": {cause}}}'


class FsxImport:
    """`start` -> ... -> `succeeded`, or -> `failed` with $failure assigned."""

    def __init__(
        self,
        scope: Construct,
        *,
        file_system_id: str,
        file_system_arn: str,
        import_path: str,
        report_path: str,
        timeout_minutes: int,
        succeeded: sfn.IChainable,
        failed: sfn.IChainable,
    ) -> None:
        self.scope = scope
        start = self._start_task(file_system_id, file_system_arn, import_path, report_path, timeout_minutes)
        start.add_catch(
            failed,
            errors=["States.ALL"],
            outputs={},
            assign={
                "failure": expression(
                    failure(
                        ERROR_IMPORT_FAILED,
                        f'"Could not start the FSx import of {import_path}: " & $states.errorOutput.Cause',
                    )
                )
            },
        )
        wait = sfn.Wait.jsonata(
            scope, "WaitForImport", time=sfn.WaitTime.duration(Duration.seconds(POLL_SECONDS))
        )
        describe = tasks.CallAwsService.jsonata(
            scope,
            "DescribeImport",
            service="fsx",
            action="describeDataRepositoryTasks",
            iam_action="fsx:DescribeDataRepositoryTasks",
            parameters={"TaskIds": [expression("$importTask.TaskId")]},
            # DescribeDataRepositoryTasks supports no resource types (Service Authorization Reference, FSx).
            iam_resources=["*"],
            assign={"importTask": expression("$states.result.DataRepositoryTasks[0]")},
            outputs={},
        )
        describe.add_retry(errors=list(FSX_TRANSIENT_ERRORS), interval=Duration.seconds(5), max_attempts=5)
        # Any other error, or the transient ones past their retries: the run fails, the controller lets go.
        describe.add_catch(
            failed,
            errors=["States.ALL"],
            outputs={},
            assign={
                "failure": expression(
                    failure(
                        ERROR_IMPORT_FAILED,
                        f'"Could not follow FSx import task " & $importTask.TaskId & " of {import_path}: " '
                        '& $states.errorOutput.Error & ": " & $states.errorOutput.Cause',
                    )
                )
            },
        )
        start.next(wait).next(describe).next(self._ended(import_path, wait, succeeded, failed))
        self.start = start

    def _start_task(
        self,
        file_system_id: str,
        file_system_arn: str,
        import_path: str,
        report_path: str,
        timeout_minutes: int,
    ) -> tasks.CallAwsService:
        start = tasks.CallAwsService.jsonata(
            self.scope,
            "StartImport",
            comment="FSx imports the prefix's new and changed objects' metadata before training reads it.",
            service="fsx",
            action="createDataRepositoryTask",
            iam_action="fsx:CreateDataRepositoryTask",
            parameters={
                "Type": "IMPORT_METADATA_FROM_REPOSITORY",
                "FileSystemId": file_system_id,
                "Paths": [import_path],
                "Report": {
                    "Enabled": True,
                    "Path": report_path,
                    "Format": "REPORT_CSV_20191124",
                    "Scope": "FAILED_FILES_ONLY",
                },
            },
            iam_resources=[file_system_arn, any_task_arn(self.scope)],
            assign={
                "importTask": expression("$states.result.DataRepositoryTask"),
                "importDeadline": expression(f"$millis() + {timeout_minutes * 60_000}"),
            },
            outputs={},
        )
        # Another task (a manual one, an export) holds the file system: wait for it, up to ~40 minutes.
        start.add_retry(
            errors=[TASK_EXECUTING], interval=Duration.seconds(60), backoff_rate=1.5, max_attempts=7
        )
        start.add_retry(errors=list(FSX_TRANSIENT_ERRORS), interval=Duration.seconds(5), max_attempts=5)
        return start

    def _ended(
        self, import_path: str, wait: sfn.IChainable, succeeded: sfn.IChainable, failed: sfn.IChainable
    ) -> sfn.Choice:
        task = '"FSx import task " & $importTask.TaskId & " of ' + import_path + '"'
        ended_badly = failure(
            ERROR_IMPORT_FAILED,
            f'{task} & " ended " & $importTask.Lifecycle & ": " '
            "& ($exists($importTask.FailureDetails.Message) ? $importTask.FailureDetails.Message "
            ': "no details")'
            f' & ". Report of the files that failed: " & {_REPORT}',
        )
        timed_out = failure(
            ERROR_IMPORT_TIMED_OUT,
            f'{task} & " was still " & $importTask.Lifecycle & " at the timeout; it was canceled. Report: " '
            f"& {_REPORT}",
        )
        cancel = tasks.CallAwsService.jsonata(
            self.scope,
            "CancelImport",
            service="fsx",
            action="cancelDataRepositoryTask",
            iam_action="fsx:CancelDataRepositoryTask",
            parameters={"TaskId": expression("$importTask.TaskId")},
            iam_resources=[any_task_arn(self.scope)],
            outputs={},
        )
        # The run fails either way; a cancel that fails (the task just ended) changes nothing.
        cancel.add_catch(failed, errors=["States.ALL"], outputs={})
        cancel.next(failed)
        return (
            sfn.Choice.jsonata(self.scope, "IsImportDone")
            .when(sfn.Condition.jsonata(expression('$importTask.Lifecycle = "SUCCEEDED"')), succeeded)
            .when(
                sfn.Condition.jsonata(
                    expression('$importTask.Lifecycle in ["FAILED", "CANCELED", "CANCELING"]')
                ),
                failed,
                assign={"failure": expression(ended_badly)},
            )
            .when(
                sfn.Condition.jsonata(expression("$millis() >= $importDeadline")),
                cancel,
                assign={"failure": expression(timed_out)},
            )
            .otherwise(wait)
        )


def any_task_arn(scope: Construct) -> str:
    """Every FSx data repository task of the account and Region (their ids are chosen by FSx)."""
    return Stack.of(scope).format_arn(service="fsx", resource="task", resource_name="*")
