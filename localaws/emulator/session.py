"""`local_stepfunctions()`: moto's Step Functions interpreter (a copy of LocalStack's) made to run
JSONata state machines the way AWS does, on a pluggable clock.

What it changes inside moto, for the duration of the `with` block:
- JSONata: every expression is evaluated by jsonata 2.0.6, AWS's engine, with Step Functions' functions,
  its variables passed as bindings (jsonata_states.py, jsonata_engine.py); an evaluation error fails the
  state with States.QueryEvaluationError, as on AWS. Timestamps reach expressions and aws-sdk results as
  AWS writes them, ISO 8601 with `Z` (timestamps.py).
- Time: $now()/$millis(), execution start times (`$states.context.Execution.StartTime`), history
  timestamps, Wait states, Retry intervals and the state machine's TimeoutSeconds follow the clock.
- Errors: aws-sdk task errors are named as AWS names them (errors.py), with SageMaker registered.
- Child executions (states:startExecution, .sync:2): cased as on AWS, a refused start named
  `StepFunctions.<Code>` as AWS documents it, stopped with a parent that stops waiting for them
  (nested_executions.py).
- Ends: an ending execution's output, error and cause are written before its status, so no reader sees
  an end without them (execution_ends.py).
- Versions: executions of a version listed and described as the state machine's (versions.py).
- StartSyncExecution of Express machines, and aws-sdk tasks on CloudWatch Logs (sync_executions.py), whose
  FilterLogEvents keeps to `logStreamNamePrefix` (log_streams.py).
- aws-sdk task arguments and results use PascalCase member names, as on AWS ("even if the native
  service API is in camelCase": Step Functions' own API, ECS, ...), converted with moto's
  LocalStack helpers along the operation's shapes in botocore's model.
- Limits: the 25,000-event history and the 256 KiB payloads fail an execution, a state or a task as on
  AWS; States.Runtime is never caught (limits.py).
- Speed: a definition is parsed once per session, not once per execution (the parsed program keeps no
  execution state); the aws-sdk and `.sync` tasks share one boto3 client per Region and service for the
  session, where moto made one per call and per poll ("Low-level clients are thread safe", boto3's guide,
  Multithreading and multiprocessing).
"""

from __future__ import annotations

import logging
import threading
import types
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from functools import cache
from typing import Any
from unittest import mock

import botocore.session

from localaws.emulator import (
    dynamodb_items,
    execution_ends,
    jsonata_states,
    limits,
    log_streams,
    nested_executions,
    sync_executions,
    versions,
)
from localaws.emulator.clock import Clock, VirtualClock
from localaws.emulator.errors import SERVICE_ERROR_NAMES, aws_sdk_error_name
from localaws.emulator.timestamps import write_aws_timestamps

# moto modules that read the wall clock for what the emulator's clock should decide.
_CLOCK_READERS = (
    "moto.stepfunctions.parser.models",  # execution start dates
    "moto.stepfunctions.parser.backend.execution",  # execution stop dates
    "moto.stepfunctions.parser.asl.eval.event.event_manager",  # history event timestamps
    "moto.stepfunctions.parser.asl.component.state.state",  # $states.context.State.EnteredTime
    "moto.stepfunctions.parser.asl.component.state.wait.wait_function.timestamp",  # Wait Timestamp
)


@contextmanager
def local_stepfunctions(
    clock: Clock | None = None, *, quiet: bool = True, data_limit_caught_by_states_all: bool = False
) -> Iterator[Clock]:
    """Patch moto's Step Functions interpreter for AWS's JSONata, error names, limits and the given clock
    (a VirtualClock by default) and yield the clock. Combine with
    `mock_aws(config={"stepfunctions": {"execute_state_machine": True}})` (inside or outside).
    `data_limit_caught_by_states_all`: whether States.ALL catches a task's States.DataLimitExceeded
    (AWS's documentation says no, a recording of AWS says yes: limits.py)."""
    clock = clock or VirtualClock()
    with ExitStack() as patches:
        for patch in _patches(clock, quiet) + limits.patches(
            data_limit_caught_by_states_all=data_limit_caught_by_states_all
        ):
            patches.enter_context(patch)
        yield clock


def _patches(clock: Clock, quiet: bool) -> list[Any]:
    import importlib

    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
    from moto.stepfunctions.parser.asl.component.program.program import Program
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
        state_task_service_aws_sdk as aws_sdk,
    )
    from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import WaitFunction
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
    from moto.stepfunctions.parser.asl.utils import boto_client

    def wait_interval(self, env, wait_seconds: int) -> None:
        clock.wait_state(wait_seconds, env.program_state_event, env.is_running)

    patches = [
        mock.patch.object(WaitFunction, "_wait_interval", wait_interval),
        mock.patch.object(retrier_decl, "time", types.SimpleNamespace(sleep=clock.retry_sleep)),
        mock.patch.object(Program, "eval", _program_eval_on(clock)),
        mock.patch.dict(aws_sdk._SERVICE_ERROR_NAMES, SERVICE_ERROR_NAMES),
        mock.patch.object(
            aws_sdk.StateTaskServiceAwsSdk, "_normalise_exception_name", staticmethod(_exception_name)
        ),
        mock.patch.object(aws_sdk.StateTaskServiceAwsSdk, "_normalise_parameters", _arguments_in_model_names),
        mock.patch.object(aws_sdk.StateTaskServiceAwsSdk, "_normalise_response", _response_in_pascal_names),
        mock.patch.object(AmazonStateLanguageParser, "parse", _parse_once(AmazonStateLanguageParser.parse)),
        mock.patch.object(boto_client, "boto3", _ReusedClients()),
    ]
    patches += jsonata_states.patches(clock) + nested_executions.patches() + execution_ends.patches()
    patches += versions.patches() + sync_executions.patches() + log_streams.patches() + clock.patches()
    patches += dynamodb_items.patches()
    clock_datetime = _datetime_module_on(clock)
    patches += [
        mock.patch.object(importlib.import_module(name), "datetime", clock_datetime)
        for name in _CLOCK_READERS
    ]
    if quiet:
        # JSONPath Choice rules probing absent fields log each probe as an ERROR.
        patches.append(
            mock.patch.object(logging.getLogger("moto.stepfunctions.parser"), "level", logging.CRITICAL)
        )
    return patches


class _ReusedClients:
    """Stands for the boto3 module in moto's boto_client_for: a client per Region, service and endpoint,
    made on first use (its credentials and config are the same at every call)."""

    def __init__(self) -> None:
        self._clients: dict[tuple, Any] = {}
        self._lock = threading.Lock()

    def client(self, **arguments: Any) -> Any:
        import boto3

        key = (arguments["region_name"], arguments["service_name"], arguments.get("endpoint_url"))
        with self._lock:
            if key not in self._clients:
                self._clients[key] = boto3.client(**arguments)
            return self._clients[key]


def _exception_name(service_error_name: str, error: Exception) -> str:
    from botocore.exceptions import ClientError
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
        state_task_service_aws_sdk as aws_sdk,
    )

    service = {name: service for service, name in aws_sdk._SERVICE_ERROR_NAMES.items()}.get(
        service_error_name, service_error_name.lower()
    )
    botocore_service = aws_sdk.StateTaskServiceAwsSdk._SERVICE_NAME_SFN_TO_BOTO_OVERRIDES.get(
        service, service
    )
    code = error.response["Error"]["Code"] if isinstance(error, ClientError) else type(error).__name__
    return aws_sdk_error_name(service_error_name, botocore_service, code)


@cache
def _operation_model(botocore_service: str, action: str):
    model = botocore.session.get_session().get_service_model(botocore_service)
    return model.operation_model(action[0].upper() + action[1:])


def _arguments_in_model_names(self, parameters: dict, *args, **kwargs) -> None:
    self._to_boto_request(
        parameters, _operation_model(self._get_boto_service_name(), self.resource.api_action).input_shape
    )


def _response_in_pascal_names(self, response: Any, *args, **kwargs) -> None:
    self._from_boto_response(
        response, _operation_model(self._get_boto_service_name(), self.resource.api_action).output_shape
    )
    if isinstance(response, dict):
        write_aws_timestamps(response)


def _program_eval_on(clock: Clock):
    """Program.eval with the state machine's TimeoutSeconds measured on the clock."""
    from moto.stepfunctions.parser.asl.component.program.program import Program
    from moto.stepfunctions.parser.utils import TMP_THREADS

    def program_eval(self, env) -> None:
        env.next_state_name = self.start_at.start_at_name
        worker = threading.Thread(target=super(Program, self).eval, args=(env,), daemon=True)
        TMP_THREADS.append(worker)
        if not self.timeout_seconds:
            worker.start()
            worker.join()
            return
        # Set before the first state runs, so that no wait can pass it unnoticed.
        deadline = clock.deadline(self.timeout_seconds.timeout_seconds)
        worker.start()
        try:
            while worker.is_alive():
                worker.join(0.01)
                if worker.is_alive() and clock.watched_time() >= deadline.at:
                    env.set_timed_out()
                    return
        finally:
            clock.resolve(deadline)

    return program_eval


def _datetime_module_on(clock: Clock) -> types.ModuleType:
    """The `datetime` module with `datetime.now()` read from the clock."""
    import datetime as real

    class ClockDatetime(datetime):
        @classmethod
        def now(cls, tz=None) -> datetime:
            return clock.now(tz)

    module = types.ModuleType("datetime")
    module.__dict__.update(real.__dict__)
    module.datetime = ClockDatetime
    return module


_PROGRAMS: dict[str, Any] = {}
_PROGRAMS_LOCK = threading.Lock()


def _parse_once(parse):
    def parse_cached(definition: str):
        with _PROGRAMS_LOCK:
            if definition not in _PROGRAMS:
                _PROGRAMS[definition] = parse(definition)
            return _PROGRAMS[definition]

    return staticmethod(parse_cached)
