"""Corrections to moto's Model Registry (moto 5.2), installed with the fake SageMaker (routes.py).

UpdateModelPackage: moto sets CustomerMetadataProperties and ApprovalDescription to None when a call
leaves them out. SageMaker's API reference (UpdateModelPackage) lists CustomerMetadataProperties ("the
metadata properties associated with the model package versions") beside a separate
CustomerMetadataPropertiesToRemove, so a call without them changes none: inferred from that pair,
marked assumed. Here a member the call leaves out stays as it was.
"""

from __future__ import annotations

import json
from typing import Any

from moto.core.responses import ActionResult
from moto.sagemaker.models import sagemaker_backends
from moto.sagemaker.responses import SageMakerResponse

from localaws.sagemaker.training_jobs import ACCOUNT


def update_model_package(body: dict[str, Any], region: str) -> dict[str, Any]:
    backend = sagemaker_backends[ACCOUNT][region]  # the region the call was made to
    arn = body["ModelPackageArn"]
    package = backend.model_packages[backend.model_package_name_mapping.get(arn, arn)]
    kept = {
        "approval_description": package.approval_description,
        "customer_metadata_properties": package.customer_metadata_properties,
    }
    backend.update_model_package(
        model_package_arn=arn,
        model_approval_status=body.get("ModelApprovalStatus"),
        approval_description=body.get("ApprovalDescription", kept["approval_description"]),
        customer_metadata_properties={
            **(kept["customer_metadata_properties"] or {}),
            **body.get("CustomerMetadataProperties", {}),
        },
        customer_metadata_properties_to_remove=body.get("CustomerMetadataPropertiesToRemove", []),
        additional_inference_specifications_to_add=body.get("AdditionalInferenceSpecificationsToAdd"),
    )
    return {"ModelPackageArn": package.arn}


def install(monkeypatch) -> None:
    """Answer UpdateModelPackage as above for the rest of the test (or demo)."""

    def handle(self: SageMakerResponse) -> ActionResult:
        return ActionResult(update_model_package(json.loads(self.body or "{}"), self.region))

    monkeypatch.setattr(SageMakerResponse, "update_model_package", handle)
