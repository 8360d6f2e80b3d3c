"""What a closed window runs: the training set's manifest; no training when its hash equals the one of the
profile's last successful triggered run (the output says so); else FSx catches up (fsx_import.py, FSx on)
and the pipeline runs the profile (startExecution.sync:2, so the controller holds the profile until the run
ends: at most one triggered run per profile in flight). The decision is written to the profile's item
(lastDecision; lastHash and lastHashRun after a success). Then the controller lets go, or, when events
arrived meanwhile, hands the profile to a new execution of this machine, which waits for the new window:
exactly one more run, and each execution's history stays one window long.
"""

from __future__ import annotations

from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.pipeline.dataset_manifest import DatasetManifest
from stacks.pipeline.jsonata_text import expression, literal
from stacks.pipeline.machine_kit import STEP_FUNCTIONS_ERROR, retry_must_succeed_call
from stacks.pipeline.manifest_listing import ERROR_DATASET_TOO_LARGE
from stacks.pipeline.trigger.fsx_import import FsxImport, failure
from stacks.pipeline.trigger.trigger_calls import CONDITION_FAILED, TriggerTable, lease, number, text
from trainstack.trigger_settings import RetrainOnNewData, profile_key

ERROR_TRAINING_RUN_FAILED = "TriggeredRunFailed"
ERROR_LISTING_FAILED = "DatasetListingFailed"
ERROR_TRIGGER_STATE_FAILED = "TriggerStateFailed"
# The states that free the profile: every Task after CloseWindow reaches one of them on any error.
RELEASE_STATES = ("LetGo", "Release")
_ERROR_TEXT = '$states.errorOutput.Error & ": " & $states.errorOutput.Cause'


def caught(error: str, what: str) -> dict[str, str]:
    """The assign of a Catch on States.ALL: $failure named `error`, its cause `what` (JSONata text) and
    the error caught."""
    return {"failure": expression(failure(error, f'{what} & ": " & {_ERROR_TEXT}'))}


def decision(kind: str, message: str, extra: str = "") -> str:
    """JSONata: what the execution outputs and the item keeps as lastDecision (`extra`: more fields)."""
    return (
        f'{{"decision": {literal(kind)}, "message": {message}, "atMillis": $millis(), "runName": $runName, '
        f'"manifest": $datasetManifest, "events": $window.events{extra}}}'
    )


class FsxTarget:
    """The file system and the S3 paths of its import task."""

    def __init__(self, file_system_id: str, file_system_arn: str, import_path: str, report_path: str):
        self.file_system_id, self.file_system_arn = file_system_id, file_system_arn
        self.import_path, self.report_path = import_path, report_path


class TriggeredRun:
    """`start`: the first state after a window closed."""

    def __init__(
        self,
        scope: Construct,
        *,
        project: str,
        trigger: RetrainOnNewData,
        table: TriggerTable,
        dataset_bucket: s3.IBucket,
        dataset_bucket_name: str,
        pipeline: sfn.IStateMachine,
        fsx: FsxTarget | None,
        self_arn: str,
        lease_seconds: int,
    ) -> None:
        self.scope, self.table, self.trigger = scope, table, trigger
        finish = self._finish()
        self.release = self._release(finish)
        after = self._let_go_or_hand_over(finish, self_arn)
        self.failed, not_retried = self._record_failure(after)
        manifest = self._manifest(
            project,
            dataset_bucket,
            dataset_bucket_name,
            lease_seconds,
            failed=self.failed,
            not_retried=not_retried,
        )
        unchanged = table.update(
            "RecordUnchanged",
            "SET lastDecision = :decision REMOVE failedWindows",
            {":decision": text("$string($result)")},
        )
        unchanged.add_catch(after, errors=["States.ALL"], outputs={})
        run = self._run(pipeline, after)
        first = run if fsx is None else self._import(fsx, run)
        stamp = "$fromMillis($millis(), '[Y0001][M01][D01]-[H01][m01][s01]')"
        prepare = sfn.Pass.jsonata(
            scope,
            "NameRun",
            assign={
                "runName": expression(f'"{project}-data-" & {stamp} & "-{profile_key(trigger.profile)}"'),
                "failure": expression("null"),
            },
        )
        same = "$datasetManifest.hash = $window.lastHash and $exists($window.lastHash)"
        is_new = (
            sfn.Choice.jsonata(scope, "IsDatasetNew")
            .when(
                sfn.Condition.jsonata(expression(same)),
                unchanged.next(after),
                assign={
                    "result": expression(
                        decision(
                            "unchanged",
                            '"No training started: the dataset under '
                            + trigger.prefix
                            + ' has the hash " & $datasetManifest.hash & " of its last successful run, " '
                            "& $window.lastHashRun",
                        )
                    )
                },
            )
            .otherwise(first)
        )
        self.start = prepare.next(manifest).next(is_new)

    def _manifest(
        self,
        project: str,
        dataset_bucket: s3.IBucket,
        dataset_bucket_name: str,
        lease_seconds: int,
        *,
        failed: sfn.IChainable,
        not_retried: sfn.IChainable,
    ) -> DatasetManifest:
        """The training set's manifest; its failures recorded by `failed` (retried) or `not_retried`."""
        # A listing can take hours (manifest_listing.max_listing_seconds): each child listing starts with
        # the lease renewed, so the profile stays this execution's for the import and the run after it.
        # A lease lost meanwhile (another execution took the profile) ends this one before it runs.
        renew = self.table.update(
            "RenewLease",
            "SET controllerUntil = :until",
            lease(lease_seconds),
            condition="controller = :me",
        )
        renew.add_catch(
            self.release,
            errors=["States.ALL"],
            outputs={},
            assign=caught(ERROR_TRIGGER_STATE_FAILED, '"Could not renew the lease on the profile"'),
        )
        manifest = DatasetManifest(
            self.scope,
            "Manifest",
            project=project,
            bucket=dataset_bucket,
            bucket_name=dataset_bucket_name,
            prefix=literal(self.trigger.prefix),
            listed_prefixes=[self.trigger.prefix],
            before_each_listing=renew,
        )
        listing_failed = failure(
            ERROR_LISTING_FAILED, f'"Could not list s3://<datasets>/{self.trigger.prefix}: " & {_ERROR_TEXT}'
        )
        # A prefix past the manifest's bound fails as such; its cause states the bound.
        too_large = failure(ERROR_DATASET_TOO_LARGE, "$states.errorOutput.Cause")
        is_too_large = f'$states.errorOutput.Error = "{ERROR_DATASET_TOO_LARGE}"'
        # The same prefix would pass the bound again: a retry would list it all again for nothing.
        how_failed = (
            sfn.Choice.jsonata(self.scope, "IsDatasetTooLarge")
            .when(
                sfn.Condition.jsonata(expression(f'$failure.error = "{ERROR_DATASET_TOO_LARGE}"')),
                not_retried,
            )
            .otherwise(failed)
        )
        manifest.add_catch(
            how_failed,
            assign={"failure": expression(f"{is_too_large} ? {too_large} : {listing_failed}")},
        )
        return manifest

    def _import(self, fsx: FsxTarget, run: sfn.IChainable) -> sfn.IChainable:
        return FsxImport(
            self.scope,
            file_system_id=fsx.file_system_id,
            file_system_arn=fsx.file_system_arn,
            import_path=fsx.import_path,
            report_path=fsx.report_path,
            timeout_minutes=self.trigger.fsx_import_timeout_minutes,
            succeeded=run,
            failed=self.failed,
        ).start

    def _run(self, pipeline: sfn.IStateMachine, after: sfn.IChainable) -> sfn.IChainable:
        run = tasks.StepFunctionsStartExecution.jsonata(
            self.scope,
            "RunPipeline",
            comment="One pipeline run of the profile, followed to its end.",
            state_machine=pipeline,
            integration_pattern=sfn.IntegrationPattern.RUN_JOB,
            # No AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID in the input: the pipeline refuses unknown fields.
            associate_with_parent=False,
            name=expression("$runName"),
            input=sfn.TaskInput.from_object(
                {"profile": self.trigger.profile, "runName": expression("$runName")}
            ),
            assign={
                "result": expression(
                    decision(
                        "trained",
                        '"Trained on the new data: run " & $runName',
                        ', "output": $states.result.Output',
                    )
                )
            },
            outputs={},
        )
        run.add_catch(
            self.failed,
            errors=["States.ALL"],
            outputs={},
            assign={
                "failure": expression(
                    failure(
                        ERROR_TRAINING_RUN_FAILED,
                        '"Run " & $runName & " of profile ' + self.trigger.profile + ' failed: " '
                        "& $states.errorOutput.Cause",
                    )
                )
            },
        )
        succeeded = self.table.update(
            "RecordSuccess",
            "SET lastHash = :hash, lastHashRun = :run, lastDecision = :decision REMOVE failedWindows",
            {
                ":hash": text("$datasetManifest.hash"),
                ":run": text("$runName"),
                ":decision": text("$string($result)"),
            },
        )
        # Trained; without the record the next window trains the same data again (costly, not lost).
        succeeded.add_catch(after, errors=["States.ALL"], outputs={})
        return run.next(succeeded.next(after))

    def _record_failure(self, after: sfn.IChainable) -> tuple[sfn.IChainable, sfn.IChainable]:
        """lastDecision `failed`; while retries are left the window opens again (the run is retried once
        the prefix has been quiet for quiet_minutes, through the hand-over), else the count starts over.
        Returns (that, a record that never retries: for a prefix too large to list)."""
        retries = self.trigger.failed_window_retries
        quiet = self.trigger.quiet_minutes

        def failed(then: str) -> str:
            return decision("failed", f'$failure.error & ": " & $failure.cause & {literal(then)}')

        again = f". It runs again once the prefix has been quiet for {quiet} min (at most {retries} retries)."
        final = ". No retries left: the next upload's window runs it."
        too_large = (
            ". Not retried: the same prefix would pass the bound again; split it into several prefixes."
        )
        retry = self.table.update(
            "RecordFailure",
            "SET lastDecision = :decision, firstEventMillis = if_not_exists(firstEventMillis, :now), "
            "lastEventMillis = if_not_exists(lastEventMillis, :now), "
            "pendingEvents = if_not_exists(pendingEvents, :zero), "
            "lastEventKey = if_not_exists(lastEventKey, :key) "
            "ADD failedWindows :one",
            {
                ":decision": text(f"$string({failed(again)})"),
                ":now": number("$millis()"),
                ":zero": {"N": "0"},
                ":one": {"N": "1"},
                ":key": {"S": "(retry of a failed window)"},
                ":retries": {"N": str(retries)},
            },
            condition="attribute_not_exists(failedWindows) OR failedWindows < :retries",
            assign={"result": expression(failed(again))},
        )
        give_up, not_retried = (
            self.table.update(
                state_id,
                "SET lastDecision = :decision REMOVE failedWindows",
                {":decision": text(f"$string({failed(then)})")},
                assign={"result": expression(failed(then))},
            )
            for state_id, then in (("RecordFailureNoRetry", final), ("RecordNotRetried", too_large))
        )
        retry.add_catch(give_up, errors=[CONDITION_FAILED], outputs={})
        for state in (retry, give_up, not_retried):
            state.add_catch(after, errors=["States.ALL"], outputs={})
            state.next(after)
        return retry, not_retried

    def _release(self, finish: sfn.IChainable) -> sfn.IChainable:
        """The profile freed as it stands (an open window stays: the next upload takes it over)."""
        release = self.table.update(
            "Release",
            "REMOVE controller, controllerUntil",
            {":me": text("$states.context.Execution.Name")},
            condition="controller = :me",
        )
        release.add_catch(finish, errors=["States.ALL"], outputs={})
        return release.next(finish)

    def _let_go_or_hand_over(self, finish: sfn.IChainable, self_arn: str) -> sfn.IChainable:
        let_go = self.table.update(
            "LetGo",
            "REMOVE controller, controllerUntil",
            {":me": text("$states.context.Execution.Name")},
            condition="attribute_not_exists(firstEventMillis) AND controller = :me",
        )
        hand_over = tasks.CallAwsService.jsonata(
            self.scope,
            "HandOver",
            comment="Events arrived during the run: a new execution waits for their window.",
            service="sfn",
            action="startExecution",
            parameters={
                "StateMachineArn": expression("$states.context.StateMachine.Id"),
                "Name": expression('"handover-" & $uuid()'),
                "Input": expression('$string({"handover": true, "after": $states.context.Execution.Name})'),
            },
            iam_action="states:StartExecution",
            iam_resources=[self_arn],
            outputs={},
        )
        retry_must_succeed_call(hand_over, [STEP_FUNCTIONS_ERROR, "Sfn.ExecutionLimitExceededException"])
        let_go.add_catch(hand_over, errors=[CONDITION_FAILED], outputs={})
        for state, what in ((let_go, "let go of"), (hand_over, "hand over")):
            state.add_catch(
                self.release,
                errors=["States.ALL"],
                outputs={},
                assign=caught(ERROR_TRIGGER_STATE_FAILED, f'"Could not {what} the profile"'),
            )
        let_go.next(finish)
        hand_over.next(finish)
        return let_go

    def _finish(self) -> sfn.Choice:
        return (
            sfn.Choice.jsonata(self.scope, "DidRunFail")
            .when(
                sfn.Condition.jsonata(expression("$failure != null")),
                sfn.Fail.jsonata(
                    self.scope,
                    "RunFailed",
                    error=expression("$failure.error"),
                    cause=expression("$failure.cause"),
                ),
            )
            .otherwise(sfn.Succeed.jsonata(self.scope, "Done", outputs=expression("$result")))
        )
