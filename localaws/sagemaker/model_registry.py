"""Corrections to moto's Model Registry (moto 5.2), installed with the fake SageMaker (routes.py).

UpdateModelPackage: moto sets CustomerMetadataProperties and ApprovalDescription to None when a call
leaves them out. SageMaker's API reference (UpdateModelPackage) lists CustomerMetadataProperties ("the
metadata properties associated with the model package versions") beside a separate
CustomerMetadataPropertiesToRemove, so a call without them changes none: inferred from that pair,
marked assumed. Here a member the call leaves out stays as it was.

ListModelPackages: moto filters, then pages. SageMaker pages, then filters: a page can come back empty,
or short, with a NextToken (DESIGN.md round 6: AWS's samples loop on it, aws-samples serial-batch-inference
utils.py, sagemaker-python-sdk PR 5092). Here each page reads `RegistryControl.scanned_per_page` versions
(MaxResults by default) of the group in the requested order, then keeps those of the requested
ModelApprovalStatus. The size SageMaker reads per page is not published: assumed.

CreateModelPackage: ClientToken is the call's idempotency token (botocore's sagemaker model marks it
`idempotencyToken`; API reference: "A unique token that guarantees that the call to this API is
idempotent"): a call with the token of an earlier one answers that call's version and creates none.
"""

from __future__ import annotations

import json
from typing import Any

from moto.core.responses import ActionResult
from moto.sagemaker.models import sagemaker_backends
from moto.sagemaker.responses import SageMakerResponse

from localaws.emulator import service_error
from localaws.sagemaker.calls import INTERNAL_FAILURE, CallControl, RegistryControl
from localaws.sagemaker.training_jobs import ACCOUNT

# moto's own ListModelPackages reads no more than this many versions in one call, unpaged.
_ALL_VERSIONS = 1_000_000


def _backend(region: str):
    return sagemaker_backends[ACCOUNT][region]  # the region the call was made to


def update_model_package(body: dict[str, Any], region: str) -> dict[str, Any]:
    backend = _backend(region)
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


def list_model_packages(body: dict[str, Any], control: RegistryControl, region: str) -> dict[str, Any]:
    """One page as SageMaker pages: read, then filtered by ModelApprovalStatus (module docstring)."""
    listed, _ = _backend(region).list_model_packages(
        creation_time_after=body.get("CreationTimeAfter"),
        creation_time_before=body.get("CreationTimeBefore"),
        name_contains=body.get("NameContains"),
        model_approval_status=None,
        model_package_group_name=body.get("ModelPackageGroupName"),
        model_package_type=body.get("ModelPackageType", "Unversioned"),
        sort_by=body.get("SortBy"),
        sort_order=body.get("SortOrder"),
        max_results=_ALL_VERSIONS,
        next_token=None,
    )
    start = int(body.get("NextToken") or 0)
    end = start + (control.scanned_per_page or body.get("MaxResults") or 10)
    status = body.get("ModelApprovalStatus")
    page = [
        package for package in listed[start:end] if status is None or package.model_approval_status == status
    ]
    answer: dict[str, Any] = {"ModelPackageSummaryList": [package.gen_response_object() for package in page]}
    if end < len(listed):
        answer["NextToken"] = str(end)
    return answer


def install(monkeypatch, control: RegistryControl | None = None, calls: CallControl | None = None) -> None:
    """Answer the Model Registry's calls as above for the rest of the test (or demo); CreateModelPackage
    passes `calls` (held while a test holds it, by group)."""
    control, calls = control or RegistryControl(), calls or CallControl()
    create = SageMakerResponse.create_model_package

    def handle_update(self: SageMakerResponse) -> ActionResult:
        return ActionResult(update_model_package(json.loads(self.body or "{}"), self.region))

    def handle_list(self: SageMakerResponse) -> ActionResult:
        return ActionResult(list_model_packages(json.loads(self.body or "{}"), control, self.region))

    def handle_create(self: SageMakerResponse) -> Any:
        body = json.loads(self.body or "{}")
        calls.enter("CreateModelPackage", body.get("ModelPackageGroupName", ""))
        token = body.get("ClientToken")
        packages = _backend(self.region).model_packages.values()
        earlier = [p for p in packages if token and p.client_token == token]
        if earlier:
            return ActionResult({"ModelPackageArn": earlier[0].arn})
        if control.refuse_creates:
            raise service_error(*control.refuse_creates)
        answer = create(self)
        if control.lost_creates > 0:
            control.lost_creates -= 1
            raise service_error(*INTERNAL_FAILURE)
        return answer

    monkeypatch.setattr(SageMakerResponse, "update_model_package", handle_update)
    monkeypatch.setattr(SageMakerResponse, "list_model_packages", handle_list)
    monkeypatch.setattr(SageMakerResponse, "create_model_package", handle_create)
