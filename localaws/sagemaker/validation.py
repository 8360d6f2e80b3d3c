"""SageMaker's server-side checks of CreateTrainingJob, in AWS's message format (`1 validation error
detected: ...`): botocore's sagemaker model for types, required members and ranges (the API model the
SDKs are built from), the job-name pattern and length, the HyperParameters map limits and InstanceCount
>= 1 (SageMaker API reference, CreateTrainingJob)."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import botocore.session
from botocore.validate import ParamValidator

from localaws.emulator import service_error

JOB_NAME_PATTERN = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")


@cache
def _create_input_shape():
    return (
        botocore.session.get_session()
        .get_service_model("sagemaker")
        .operation_model("CreateTrainingJob")
        .input_shape
    )


def _invalid(detail: str) -> Exception:
    return service_error("ValidationException", f"1 validation error detected: {detail}")


def validate_job_name(name: Any) -> None:
    if not isinstance(name, str) or len(name) > 63 or not JOB_NAME_PATTERN.fullmatch(name):
        raise _invalid(
            f"Value '{name}' at 'trainingJobName' failed to satisfy constraint: "
            "Member must satisfy regular expression pattern: [a-zA-Z0-9](-*[a-zA-Z0-9]){0,62} "
            "and length <= 63"
        )


def validate_create_request(request: dict[str, Any]) -> None:
    validate_job_name(request.get("TrainingJobName", ""))
    report = ParamValidator().validate(request, _create_input_shape())
    if report.has_errors():
        raise _invalid(report.generate_report())
    for key, value in request.get("HyperParameters", {}).items():
        if len(key) > 256 or len(value) > 2500:
            raise _invalid(
                "Value at 'hyperParameters' failed to satisfy constraint: "
                "Map keys must have length <= 256 and map values length <= 2500"
            )
    resources = request["ResourceConfig"]
    counts = [resources.get("InstanceCount")] + [
        preference.get("InstanceCount") for preference in resources.get("InstancePreferences", [])
    ]
    for count in counts:
        if count is not None and count < 1:
            raise _invalid(
                f"Value '{count}' at 'resourceConfig.instanceCount' failed to satisfy constraint: "
                "Member must have value greater than or equal to 1"
            )
