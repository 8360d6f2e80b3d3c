"""What every state machine of the pipeline shares: AWS's error and cause names, the retry policies by
purpose, and the name limits the input check defines. The JSONata helpers are in jsonata_text.

Error names under aws-sdk:<service>:* integrations: errors a service's API model declares are
`<Service>.<Code>Exception`; every other one, throttling and validation included, is
`<Service>.<Service>Exception` with the code and message only in the Cause (Step Functions developer guide,
"Handling errors in AWS SDK service integrations").
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration
from aws_cdk import aws_stepfunctions as sfn

from trainstack.execution_input import RUN_NAME_MAX_LENGTH

__all__ = [
    "RUN_NAME_MAX_LENGTH",
    "SAGEMAKER_ERROR",
    "retry_poll_call",
    "retry_must_succeed_call",
]

SAGEMAKER_ERROR = "SageMaker.SageMakerException"
SAGEMAKER_QUOTA_ERROR = "SageMaker.ResourceLimitExceededException"
SAGEMAKER_IN_USE_ERROR = "SageMaker.ResourceInUseException"
SAGEMAKER_NOT_FOUND_ERROR = "SageMaker.ResourceNotFoundException"
STEP_FUNCTIONS_ERROR = "Sfn.SfnException"
EXECUTION_GONE_ERROR = "Sfn.ExecutionDoesNotExistException"
# botocore's batch model declares ClientException and ServerException; everything else, throttling
# included, is Batch.BatchException.
BATCH_CLIENT_ERROR = "Batch.ClientException"
BATCH_TRANSIENT_ERRORS = ("Batch.ServerException", "Batch.BatchException")
# JSONata regexes over an error's Cause.
THROTTLE_CAUSE = "/rate exceeded|throttl/i"
NOT_FOUND_CAUSE = "/not found/i"


def retry_poll_call(task: sfn.TaskStateBase, errors: Sequence[str]) -> None:
    """A status call inside a polling loop: 2 s doubling to 60 s, full jitter, 5 attempts; when they run
    out, the next poll asks again, so the loop never ends on throttling."""
    task.add_retry(
        errors=list(errors),
        interval=Duration.seconds(2),
        backoff_rate=2,
        max_attempts=5,
        max_delay=Duration.seconds(60),
        jitter_strategy=sfn.JitterType.FULL,
    )


def retry_must_succeed_call(task: sfn.TaskStateBase, errors: Sequence[str]) -> None:
    """A call nothing asks again after (a submit, a cleanup's call): 2 s doubling to 60 s, full jitter,
    8 attempts: about 4 minutes of throttling survived."""
    task.add_retry(
        errors=list(errors),
        interval=Duration.seconds(2),
        backoff_rate=2,
        max_attempts=8,
        max_delay=Duration.seconds(60),
        jitter_strategy=sfn.JitterType.FULL,
    )
