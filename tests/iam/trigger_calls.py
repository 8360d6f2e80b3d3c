"""The retrain trigger's calls (retrain_on_new_data): a mixin of CallCatalog, one builder per integration of
the trigger machine, each the authorization AWS's Service Authorization Reference names for the request."""

from __future__ import annotations

from typing import Any

from trainstack.trigger_settings import trigger_machine_name

# A data repository task id as FSx returns it (assumed form: `task-` + 17 hex digits).
IMPORT_TASK_ID = "task-0123456789abcdef0"


class TriggerCalls:
    """Reads the catalog's app, settings, `arn()` and `argument()`."""

    def trigger_bindings(self) -> dict[str, Any]:
        """The trigger machine's variables and context as its arguments use them."""
        return {
            "importTask": {"TaskId": IMPORT_TASK_ID},
            "context": {
                "StateMachine": {
                    "Id": self.arn("states", f"stateMachine:{trigger_machine_name(self.project)}")
                },
                "Execution": {"Name": "0f6d1c8e-controller"},
            },
        }

    def _dynamodb_updateItem(self, arguments):  # noqa: N802 (named after the integration)
        return [(None, self.arn("dynamodb", f"table/{arguments['TableName']}"), {})]

    def _dynamodb_getItem(self, arguments):  # noqa: N802
        return [(None, self.arn("dynamodb", f"table/{arguments['TableName']}"), {})]

    def _fsx_createDataRepositoryTask(self, arguments):  # noqa: N802
        file_system = self.arn("fsx", f"file-system/{arguments['FileSystemId']}")
        return [(None, file_system, {}), (None, self.arn("fsx", f"task/{IMPORT_TASK_ID}"), {})]

    def _fsx_describeDataRepositoryTasks(self, arguments):  # noqa: N802
        return [(None, "*", {})]

    def _fsx_cancelDataRepositoryTask(self, arguments):  # noqa: N802
        return [(None, self.arn("fsx", f"task/{self.argument(arguments, 'TaskId')}"), {})]

    def _sfn_startExecution(self, arguments):  # noqa: N802
        return [(None, self.argument(arguments, "StateMachineArn"), {})]
