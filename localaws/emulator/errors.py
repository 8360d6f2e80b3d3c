"""Error names of `aws-sdk:<service>:<action>` tasks as AWS Step Functions reports them.

AWS names them after the AWS Java SDK's exception classes: an error code the service's API model
declares becomes `<Service>.<Code>Exception` (`SageMaker.ResourceLimitExceededException`); any other
code, notably ThrottlingException and ValidationException, becomes the service's base exception
`<Service>.<Service>Exception`, with the code and message only in the Cause
(`Rate exceeded (Service: SageMaker, Status Code: 400, Request ID: ...)`).
The declared codes come from botocore's service model, the same API model the SDKs are built from.
"""

from __future__ import annotations

from functools import cache

import botocore.session

# Lower-cased aws-sdk service name -> the service's name in error names, for services moto lacks.
SERVICE_ERROR_NAMES = {"sagemaker": "SageMaker"}


@cache
def modelled_error_codes(botocore_service: str) -> frozenset[str]:
    """The error codes the service's API model declares (shape name and any explicit wire code)."""
    model = botocore.session.get_session().get_service_model(botocore_service)
    return frozenset(code for shape in model.error_shapes for code in (shape.name, shape.error_code) if code)


def aws_sdk_error_name(service_error_name: str, botocore_service: str, code: str) -> str:
    """The error name of an aws-sdk task whose call failed with `code`."""
    if code in modelled_error_codes(botocore_service):
        return f"{service_error_name}.{code.removesuffix('Exception')}Exception"
    return f"{service_error_name}.{service_error_name}Exception"


@cache
def _service_error_class() -> type[Exception]:
    from moto.core.exceptions import ServiceException

    class ServiceError(ServiceException):
        """Defined outside moto's packages, so moto serializes it with the calling service's model."""

    return ServiceError


def service_error(code: str, message: str) -> Exception:
    """The exception a handler patched into moto raises to answer a call with an AWS error
    (HTTP 400, Error.Code `code`, Error.Message `message`)."""
    return _service_error_class()(code, message)
