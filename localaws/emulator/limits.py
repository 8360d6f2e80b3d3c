"""Step Functions' hard limits, enforced on every execution (child executions included) as AWS does.

History: a standard execution keeps at most 25,000 events (developer guide, "Avoid reaching the history
quota": "a hard quota of 25,000 entries in the execution event history"). AWS fails the execution with
`States.Runtime`, cause `The execution reached the maximum number of history events (25000).`, and that
ExecutionFailed is event 25,000: event 24,999 is the last one the machine produced (measured on AWS in
floci-io/floci#2734; the same error and cause in loads/ardere#86). A step in progress at the limit makes
no further service call (**assumed**: nothing is recorded after event 24,999).

Payloads: 262,144 bytes of UTF-8 JSON for a task's result, a state's input and output and an execution's
input (service quotas page, "Maximum input or output size for a task, state, or execution"; measured
here on compact JSON, **assumed**). Over it:
- a task's result (`The state/task '<resource type>' returned a result ...`) or its parameters after
  Arguments/Parameters (`... provided parameters ...`, wording seen on AWS in mbc-net/mbc-cqrs-serverless
  PR 466; raised before the call, **assumed**) fail the task with `States.DataLimitExceeded`. A catcher
  or retrier naming it matches it (LocalStack's recordings against AWS, test_states_errors.snapshot.json;
  cdklabs/construct-hub#1885). Whether `States.ALL` matches it: the error handling page says it cannot,
  LocalStack's recording of 2024-03-21 shows it did; `data_limit_caught_by_states_all` picks one
  (default: the documented `False`).
- a state's output (a Pass, a Map's or Parallel's results, a Catch's output) ends the execution with
  `States.DataLimitExceeded`, which no catcher of any enclosing Map or Parallel matches ("a terminal
  error", error handling page; the execution "aborts ... at the state transition boundary", construct-hub
  #1885).
- StartExecution refuses the input with `ValidationException` (botocore's model: `input` at most 262,144,
  "expressed as bytes in UTF-8 encoding"; the code and wording are **assumed**, AWS's usual
  constraint message).
`States.Runtime` is never matched by a retrier or catcher ("isn't retriable, and will always cause the
execution to fail", error handling page); moto's interpreter lets States.ALL match it.
"""

from __future__ import annotations

import datetime
import json
import threading
from typing import Any
from unittest import mock

HISTORY_EVENT_LIMIT = 25_000
PAYLOAD_LIMIT_BYTES = 262_144
DATA_LIMIT_ERROR = "States.DataLimitExceeded"
RUNTIME_ERROR = "States.Runtime"
INPUT_LIMIT_MESSAGE = (
    "1 validation error detected: Value at 'input' failed to satisfy constraint: "
    f"Member must have length less than or equal to {PAYLOAD_LIMIT_BYTES}"
)
_EXECUTION_ENDS = frozenset(
    {"ExecutionFailed", "ExecutionSucceeded", "ExecutionAborted", "ExecutionTimedOut"}
)


def history_limit_cause() -> str:
    return f"The execution reached the maximum number of history events ({HISTORY_EVENT_LIMIT})."


def payload_bytes(value: Any) -> int:
    """The size Step Functions measures: the UTF-8 bytes of the value as JSON text."""
    if not isinstance(value, str):
        # Timestamps as ISO 8601 text, as moto's interpreter writes them into the state.
        value = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_as_text)
    return len(value.encode())


def _as_text(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime.date) else str(value)


def within_payload_limit(value: Any) -> bool:
    return payload_bytes(value) <= PAYLOAD_LIMIT_BYTES


class ExecutionLimits:
    """One execution's count against its limits, kept on its event manager (shared by its Map and Parallel
    frames): the root environment to fail and the terminal failure once one happened."""

    def __init__(self, root) -> None:
        self.root = root
        self.standard = root.is_standard_workflow()
        self.terminal: dict | None = None
        self.lock = threading.RLock()

    def terminate(self, error: str, cause: str) -> None:
        """Fail the whole execution; nothing catches it and no later event is recorded but its end."""
        with self.lock:
            if self.terminal is None:
                self.terminal = {"error": error, "cause": cause}
        self.root.set_error(error=dict(self.terminal))


def limits_of(env) -> ExecutionLimits | None:
    return getattr(env.event_manager, "execution_limits", None)


def patches(*, data_limit_caught_by_states_all: bool = False) -> list[Any]:
    return [
        *_history_patches(),
        *_payload_patches(),
        *_matching_patches(data_limit_caught_by_states_all),
        _execution_input_patch(),
    ]


def _history_patches() -> list[Any]:
    from moto.stepfunctions.parser.asl.eval.environment import Environment
    from moto.stepfunctions.parser.asl.eval.event.event_manager import EventManager
    from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

    original_environment = ExecutionWorker._get_evaluation_environment
    original_add_event = EventManager.add_event
    original_set_error = Environment.set_error

    def evaluation_environment(self):
        env = original_environment(self)
        env.event_manager.execution_limits = ExecutionLimits(env)
        return env

    def add_event(self, context, event_type, *args, **kwargs) -> int:
        limits: ExecutionLimits | None = getattr(self, "execution_limits", None)
        if limits is None or event_type in _EXECUTION_ENDS:
            return original_add_event(self, context, event_type, *args, **kwargs)
        with limits.lock:
            recorded = self._event_id_gen._next_id - 1
            # The event numbered HISTORY_EVENT_LIMIT is left for the execution's end.
            at_limit = limits.standard and recorded + 1 >= HISTORY_EVENT_LIMIT
            if limits.terminal is None and not at_limit:
                return original_add_event(self, context, event_type, *args, **kwargs)
        if limits.terminal is None:
            limits.terminate(RUNTIME_ERROR, history_limit_cause())
        return recorded

    def set_error(self, error) -> None:
        limits = limits_of(self)
        original_set_error(self, error=dict(limits.terminal) if limits and limits.terminal else error)

    return [
        mock.patch.object(ExecutionWorker, "_get_evaluation_environment", evaluation_environment),
        mock.patch.object(EventManager, "add_event", add_event),
        mock.patch.object(Environment, "set_error", set_error),
    ]


def _payload_patches() -> list[Any]:
    import importlib

    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service import (
        StateTaskService,
    )
    from moto.stepfunctions.parser.asl.component.state.state import CommonStateField

    original_state_check = CommonStateField._verify_size_quota
    original_before_call = StateTaskService._before_eval_execution

    def verify_state_output(self, env, value) -> None:
        if not within_payload_limit(value):
            limits = limits_of(env)
            if limits is not None:
                limits.terminate(
                    DATA_LIMIT_ERROR,
                    f"The state/task '{self.name}' returned a result with a size exceeding "
                    "the maximum number of bytes service limit.",
                )
        original_state_check(self, env, value)

    def before_call(self, env, resource_runtime_part, raw_parameters, state_credentials) -> None:
        if not within_payload_limit(raw_parameters):
            raise _task_failure(
                env,
                self,
                DATA_LIMIT_ERROR,
                f"The state/task '{self.name}' provided parameters with a size exceeding "
                "the maximum number of bytes service limit.",
            )
        original_before_call(self, env, resource_runtime_part, raw_parameters, state_credentials)
        limits = limits_of(env)
        if limits is not None and limits.terminal is not None:
            # The execution ended while this task was being scheduled: the call is never made.
            raise _task_failure(env, self, limits.terminal["error"], limits.terminal["cause"])

    quota_readers = (
        "moto.stepfunctions.parser.asl.component.state.state",
        "moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service",
        "moto.stepfunctions.parser.asl.component.state.exec.state_task.state_task_lambda",
    )
    return [
        mock.patch.object(CommonStateField, "_verify_size_quota", verify_state_output),
        mock.patch.object(StateTaskService, "_before_eval_execution", before_call),
        *(
            # moto refuses a payload of exactly 262,144 bytes; AWS allows it.
            mock.patch.object(importlib.import_module(name), "is_within_size_quota", within_payload_limit)
            for name in quota_readers
        ),
    ]


def _task_failure(env, task, error: str, cause: str) -> Exception:
    from moto.stepfunctions.parser.api import HistoryEventType, TaskFailedEventDetails
    from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
        FailureEvent,
        FailureEventException,
    )
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import StatesErrorName
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import (
        StatesErrorNameType,
    )
    from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails

    details = TaskFailedEventDetails(
        error=error,
        cause=cause,
        resource=task._get_sfn_resource(),
        resourceType=task._get_sfn_resource_type(),
    )
    return FailureEventException(
        FailureEvent(
            env=env,
            error_name=StatesErrorName(typ=StatesErrorNameType.from_name(error)),
            event_type=HistoryEventType.TaskFailed,
            event_details=EventDetails(taskFailedEventDetails=details),
        )
    )


def _matching_patches(data_limit_caught_by_states_all: bool) -> list[Any]:
    from moto.stepfunctions.parser.asl.component.common.error_name.error_equals_decl import ErrorEqualsDecl

    original = ErrorEqualsDecl._eval_body

    def error_equals(self, env) -> None:
        name = getattr(env.stack[-1], "error_name", None)
        named = name in {error_name.error_name for error_name in self.error_names}
        limits = limits_of(env)
        uncatchable = (
            (limits is not None and limits.terminal is not None)
            or name == RUNTIME_ERROR
            or (name == DATA_LIMIT_ERROR and not named and not data_limit_caught_by_states_all)
        )
        if uncatchable:
            env.stack.pop()
            env.stack.append(False)
            return
        original(self, env)

    return [mock.patch.object(ErrorEqualsDecl, "_eval_body", error_equals)]


def _execution_input_patch() -> Any:
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    from localaws.emulator.errors import service_error

    original = StepFunctionsParserBackend.start_execution

    def start_execution(self, state_machine_arn, name=None, execution_input=None, *args, **kwargs):
        if execution_input is not None and not within_payload_limit(execution_input):
            raise service_error("ValidationException", INPUT_LIMIT_MESSAGE)
        return original(self, state_machine_arn, name, execution_input, *args, **kwargs)

    return mock.patch.object(StepFunctionsParserBackend, "start_execution", start_execution)
