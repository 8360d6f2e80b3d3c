"""The registered versions of the profiles' model package groups, and a person's approval decision on one
(`trainstack models`, `approve`, `reject`; docs/registry.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from trainstack.registry import LINEAGE_KEYS, group_name
from trainstack.registry_settings import APPROVED, REJECTED

VERSION_ARN = re.compile(r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:\d{12}:model-package/[^/]+/\d+$")


@dataclass(frozen=True)
class Version:
    arn: str
    group: str
    number: int
    status: str
    created: Any
    description: str
    lineage: dict[str, str]

    @property
    def loss(self) -> str:
        return self.lineage.get(LINEAGE_KEYS["loss"], "-")


def registered_profiles(settings) -> list[str]:
    return [profile.name for profile in settings.profiles if profile.registry is not None]


def versions(sagemaker, settings, profile: str | None = None) -> list[Version]:
    """Every version of the profile's group (all profiles with a registry: block), oldest first."""
    found = []
    for name in [profile] if profile else registered_profiles(settings):
        group = group_name(settings.project, name)
        pages = sagemaker.get_paginator("list_model_packages").paginate(
            ModelPackageGroupName=group, ModelPackageType="Versioned", SortBy="CreationTime"
        )
        for page in pages:
            for summary in page["ModelPackageSummaryList"]:
                found.append(describe(sagemaker, summary["ModelPackageArn"]))
    return found


def describe(sagemaker, arn: str) -> Version:
    package = sagemaker.describe_model_package(ModelPackageName=arn)
    return Version(
        arn=package["ModelPackageArn"],
        group=package.get("ModelPackageGroupName", ""),
        number=package.get("ModelPackageVersion", 0),
        status=package.get("ModelApprovalStatus", "-"),
        created=package.get("CreationTime"),
        description=package.get("ApprovalDescription", ""),
        lineage=package.get("CustomerMetadataProperties", {}),
    )


def decide(sagemaker, arn: str, status: str, reason: str, person: str) -> None:
    """Approve or reject a version, saying who and why in its ApprovalDescription."""
    assert status in (APPROVED, REJECTED)
    sagemaker.update_model_package(
        ModelPackageArn=arn,
        ModelApprovalStatus=status,
        ApprovalDescription=f"{status.lower()} by {person}: {reason}"[:1024],
    )


def run_facts(model_package: dict | None) -> dict[str, str]:
    """What a run's report says of its evaluation and registration (the execution output's modelPackage);
    nothing for a profile without a registry: block."""
    if not model_package:
        return {}
    evaluation = model_package["evaluation"]
    # The product's evaluation reports loss, perplexity and tokens; a team's own reports its metric only
    # (stacks/pipeline/registry/evaluation_request.py, evaluation_metrics: members not reported are absent).
    measured = (
        f"loss {evaluation['loss']:.4f}, perplexity {evaluation['perplexity']:.2f} over "
        f"{int(evaluation['tokens']):,} tokens"
        if "loss" in evaluation
        else f"the profile's metric {evaluation['metric']:g}"
    )
    return {
        "Evaluation": measured,
        "Model version": f"{model_package['modelPackageArn']}: {model_package['decision']} "
        f"({model_package['reason']})",
    }
