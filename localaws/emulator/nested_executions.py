"""`states:startExecution` tasks (child executions, e.g. `.sync:2`) as AWS runs them.

moto's copy of LocalStack's interpreter leaves out the casing LocalStack applies to these tasks:
`Input`/`StateMachineArn` never reach boto3 as `input`/`stateMachineArn` (the call fails), and results
keep boto3's `executionArn`/`output` where AWS answers `ExecutionArn`/`Output`. Both conversions use the
Step Functions API model. moto also checks a running child every 0.5 real seconds; the emulator's
clocks make children finish in milliseconds, so another service's `.sync` poll checks far more often, and
a child execution's poll sleeps until an execution ends instead (clock.py).

A StartExecution that Step Functions refuses fails the task with `StepFunctions.<Error.Code>`: AWS's
developer guide names the refusal for too many open executions `StepFunctions.ExecutionLimitExceeded`
("Start workflow executions from a task state"; ExecutionLimitExceeded is the code in the API model).
moto appends `Exception` to every code (`StepFunctions.ExecutionLimitExceededException`), a name only
the emulator would produce. The Cause stays moto's (message plus SDK-style service details).

A child started with `.sync`/`.sync:2` is stopped when its parent stops waiting for it unfinished (the
parent stopped, timed out or failed elsewhere); moto leaves it running. AWS stops it: the developer
guide's IAM policy for the synchronous pattern grants `states:StopExecution` on the child's executions
for this ("IAM policies for AWS Step Functions", Synchronous), and a `.sync` job of another service
is ended when "the Task state in AWS Step Functions execution [...] which was managing this resource was
aborted" (AWS Batch's status reason, quoted in stackoverflow.com/questions/45596276). The stop carries no
error or cause (**assumed**: AWS publishes none).
"""

from __future__ import annotations

from functools import cache
from typing import Any
from unittest import mock

import botocore.session

SYNC_CHECK_SECONDS = 0.005


@cache
def _model():
    return botocore.session.get_session().get_service_model("stepfunctions")


def _stop_if_running(execution_arn: str) -> None:
    from moto.stepfunctions.responses import get_backend

    _, _, _, region, account, *_ = execution_arn.split(":")
    backend = get_backend(account, region)
    if backend.describe_execution(execution_arn).status == "RUNNING":
        backend.stop_execution(execution_arn)


def patches() -> list[Any]:
    from botocore.exceptions import ClientError
    from moto.stepfunctions.parser.asl.component.common.error_name.custom_error_name import CustomErrorName
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
        state_task_service_callback,
        state_task_service_sfn,
    )

    service = state_task_service_sfn.StateTaskServiceSfn
    original_parameters = service._normalise_parameters

    def operation(task, action: str | None):
        name = "".join(part.capitalize() for part in task._get_boto_service_action(action).split("_"))
        return _model().operation_model(name)

    def normalise_parameters(self, parameters, boto_service_name=None, service_action_name=None):
        original_parameters(self, parameters, boto_service_name, service_action_name)
        self._to_boto_request(parameters, operation(self, service_action_name).input_shape)

    def normalise_response(self, response, boto_service_name=None, service_action_name=None):
        self._from_boto_response(response, operation(self, service_action_name).output_shape)

    original_from_error = service._from_error

    def from_error(self, env, ex: Exception):
        event = original_from_error(self, env, ex)
        if isinstance(ex, ClientError):
            name = f"StepFunctions.{ex.response['Error']['Code']}"
            event.error_name = CustomErrorName(name)
            event.event_details["taskFailedEventDetails"]["error"] = name
        return event

    def following_the_child(build_resolver):
        def build(self, env, *args, **kwargs):
            child = env.stack[-1]["ExecutionArn"]  # the StartExecution answer the resolver reads
            resolver = build_resolver(self, env, *args, **kwargs)
            resolver.child_execution_arn = child
            return resolver

        return build

    def eval_sync(self, env, sync_resolver, *args, **kwargs):
        try:
            # Looked up now: a clock may wrap the base class's loop (clock.py).
            return state_task_service_callback.StateTaskServiceCallback._eval_sync(
                self, env, sync_resolver, *args, **kwargs
            )
        finally:
            if not env.is_running():
                _stop_if_running(sync_resolver.child_execution_arn)

    return [
        mock.patch.object(service, "_build_sync_resolver", following_the_child(service._build_sync_resolver)),
        mock.patch.object(
            service, "_build_sync2_resolver", following_the_child(service._build_sync2_resolver)
        ),
        mock.patch.object(service, "_eval_sync", eval_sync),
        mock.patch.object(service, "_normalise_parameters", normalise_parameters),
        mock.patch.object(service, "_normalise_response", normalise_response),
        mock.patch.object(service, "_from_error", from_error),
        mock.patch.object(
            state_task_service_callback, "_DELAY_SECONDS_SYNC_CONDITION_CHECK", SYNC_CHECK_SECONDS
        ),
    ]
