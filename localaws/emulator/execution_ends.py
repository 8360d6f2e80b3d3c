"""An execution's end made visible as AWS shows it: whole.

moto's `_reflect_execution_status` (parser/backend/execution.py) sets an ending execution's status
before its output (SUCCEEDED) or its error and cause (FAILED), while other threads read it: a parent's
`.sync:2` poll, or the CLI, could read SUCCEEDED with no output (on a loaded machine the pipeline's
`$states.result.Output` then "returned nothing") or FAILED with no error. DescribeExecution on AWS answers
an ended execution with all of its fields ("output ... This field is set only if the execution succeeds";
"error"/"cause" of a failed one: botocore's stepfunctions model, DescribeExecutionOutput). Here every
field is written first and the status last: a reader that sees the end sees all of it (attribute writes
are atomic and ordered under CPython's GIL).

Map and Parallel states have no such window (read in moto 5.2.5): an iteration's output is stored on its
job before the job is closed under the pool's lock, and a Parallel reads each branch's output only after
every branch's program has returned.
"""

from __future__ import annotations

from typing import Any
from unittest import mock


def patches() -> list[Any]:
    from moto.stepfunctions.parser.api import ExecutionStatus
    from moto.stepfunctions.parser.asl.eval.program_state import (
        ProgramEnded,
        ProgramError,
        ProgramStopped,
        ProgramTimedOut,
    )
    from moto.stepfunctions.parser.backend import execution as backend

    def reflect_execution_status(self) -> None:
        execution = self.execution
        ended = execution.exec_worker.env.program_state()
        # moto's module's datetime: the session's clock (session.py patches it).
        execution.stop_date = backend.datetime.datetime.now(tz=backend.datetime.timezone.utc)
        if isinstance(ended, ProgramEnded):
            execution.output = execution.exec_worker.env.states.get_input()
            status = ExecutionStatus.SUCCEEDED
        elif isinstance(ended, ProgramStopped):
            status = ExecutionStatus.ABORTED
        elif isinstance(ended, ProgramError):
            execution.error = ended.error.get("error")
            execution.cause = ended.error.get("cause")
            status = ExecutionStatus.FAILED
        elif isinstance(ended, ProgramTimedOut):
            status = ExecutionStatus.TIMED_OUT
        else:
            raise RuntimeWarning(f"Execution ended with unsupported ProgramState type '{type(ended)}'.")
        execution.exec_status = status  # last: the end is visible only once it is whole

    return [
        mock.patch.object(
            backend.BaseExecutionWorkerCommunication, "_reflect_execution_status", reflect_execution_status
        )
    ]
