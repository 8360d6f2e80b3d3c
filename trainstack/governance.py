"""Deploying into a governed account: the compliance mode, IAM boundary and path and CDK bootstrap
qualifier (what it costs: trainstack/governance_costs.py; README, "Deploying into a governed account").

`control-tower` makes every template pass AWS Control Tower's proactive controls (cfn-guard rules that run
as CloudFormation Hooks and block a stack that violates them): customer managed KMS keys for log groups and
buckets, log groups kept a year, Lambda functions in the VPC, versioned buckets with Object Lock and
EventBridge notifications, access logs delivered to a bucket the account already has.
"""

from __future__ import annotations

from typing import Annotated, Literal

from trainstack.base import StrictModel, matching

Compliance = Literal["none", "control-tower"]
CONTROL_TOWER: Compliance = "control-tower"
# CDK's default bootstrap qualifier (DefaultStackSynthesizer.DEFAULT_QUALIFIER).
CDK_DEFAULT_QUALIFIER = "hnb659fds"
# Control Tower's CT.CLOUDWATCH.PR.2 asks for at least a year.
GOVERNED_LOG_RETENTION_DAYS = 365


class IamSettings(StrictModel):
    """Applied to every IAM role of the app, including those CDK creates for its own helpers."""

    permissions_boundary: Annotated[
        str | None,
        matching(
            r"^arn:aws[a-z-]*:iam::(\d{12}|aws):policy/([\w+=,.@-]+/)*[\w+=,.@-]{1,128}$",
            "an IAM managed policy ARN like arn:aws:iam::111111111111:policy/PlatformBoundary",
        ),
    ] = None
    # IAM's own pattern: a slash, or printable ASCII between a leading and a trailing slash (at most 512).
    role_path: Annotated[
        str,
        matching(
            r"^(/|/[\x21-\x7e]{1,510}/)$",
            "an IAM path that starts and ends with / (like /trainstack/), at most 512 printable characters",
        ),
    ] = "/"


# The bootstrap template allows [A-Za-z0-9_-]{1,10}; its asset bucket cdk-<qualifier>-assets-... must also
# be a valid S3 bucket name, so uppercase letters and underscores fail there.
BOOTSTRAP_QUALIFIER = matching(
    r"^[a-z0-9-]{1,10}$",
    "1 to 10 lowercase letters, digits or hyphens (the CDK bootstrap template's limit, and its asset "
    "bucket's name allows no uppercase or underscore)",
)
