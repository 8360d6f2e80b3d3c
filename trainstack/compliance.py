"""Deploying into a governed account: the compliance mode, IAM boundary and path, CDK bootstrap qualifier,
and what `compliance: control-tower` costs (README, "Deploying into a governed account").

`control-tower` makes every template pass AWS Control Tower's proactive controls (cfn-guard rules that run
as CloudFormation Hooks and block a stack that violates them): customer managed KMS keys for log groups and
buckets, log groups kept a year, Lambda functions in the VPC, versioned buckets with Object Lock and
EventBridge notifications, access logs delivered to a bucket the account already has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

from trainstack.base import StrictModel, matching
from trainstack.prices import GOVERNANCE_PRICES

if TYPE_CHECKING:
    from trainstack.config import Settings

Compliance = Literal["none", "control-tower"]
CONTROL_TOWER: Compliance = "control-tower"
# CDK's default bootstrap qualifier (DefaultStackSynthesizer.DEFAULT_QUALIFIER).
CDK_DEFAULT_QUALIFIER = "hnb659fds"
# Control Tower's CT.CLOUDWATCH.PR.2 asks for at least a year.
GOVERNED_LOG_RETENTION_DAYS = 365
# Checkpoints are rewritten every few minutes; with versioning (CT.S3.PR.1, needed for Object Lock) their
# overwritten versions go after a day instead of piling up.
GOVERNED_NONCURRENT_CHECKPOINT_DAYS = 1


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


@dataclass(frozen=True)
class CostItem:
    what: str
    count: int
    monthly_usd: float

    @property
    def total_usd(self) -> float:
        return round(self.count * self.monthly_usd, 2)


def governed_fixed_costs(settings: Settings) -> list[CostItem]:
    """The fixed monthly charges control-tower adds to `settings`' app (compared with compliance: none)."""
    prices = GOVERNANCE_PRICES
    log_keys = [
        settings.network.existing is None,  # network: VPC flow logs
        settings.image.uri is None,  # image: the image-copy function's logs
        True,  # pipeline: state-machine logs
    ]
    items = [
        CostItem("KMS key for the buckets", 1, prices.kms_key_month),
        CostItem("KMS keys for log groups (one per stack with logs)", sum(log_keys), prices.kms_key_month),
    ]
    if settings.network.existing is None and settings.network.egress == "endpoints":
        # The default security group's CDK handler runs in the VPC and calls the EC2 API.
        items.append(CostItem("EC2 interface endpoint", 1, prices.interface_endpoint_month))
    return items


def cost_summary(settings: Settings) -> str:
    """One line for `make synth`: what control-tower adds (or would add) per month, and what grows by use."""
    prices = GOVERNANCE_PRICES
    items = governed_fixed_costs(settings)
    total = sum(item.total_usd for item in items)
    parts = ", ".join(f"{item.count} x {item.what} ${item.monthly_usd:.2f}" for item in items if item.count)
    by_use = (
        f"plus by use: log storage kept 365 days ${prices.logs_storage_gb_month}/GB-month, "
        f"KMS requests ${prices.kms_requests_per_10k}/10,000"
    )
    if settings.compliance == CONTROL_TOWER:
        head = f"compliance: control-tower adds ${total:.2f}/month over none"
    else:
        head = f"compliance: none; control-tower would add ${total:.2f}/month"
    return f"{head} ({parts}; {by_use}; {prices.region} prices of {prices.as_of})"
