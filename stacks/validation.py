"""One way to acknowledge a validation finding (cdk-nag, CloudFormation Validate): always with a reason."""

from __future__ import annotations

import aws_cdk as cdk
from constructs import IConstruct


def acknowledge(scope: IConstruct, rule_id: str, reason: str) -> None:
    """Acknowledge `rule_id` (e.g. "AwsSolutions-IAM5[Resource::*]") on scope and its children, saying why."""
    if not reason.strip():
        raise ValueError(f"acknowledging {rule_id} needs a reason")
    cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=rule_id, reason=reason))
