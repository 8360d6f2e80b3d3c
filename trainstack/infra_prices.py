"""Dated list prices of what a deployment keeps running while no training runs, per AWS Region.

One table per Region, in USD, from the AWS pricing page named above each group of fields. They were
recorded on the date below and could not be re-checked from the build machines (no internet): a Region
missing here is not priced (the idle cost says so instead of showing another Region's figure), and a
price missing in a Region's table (None) is not priced there either. FSx for Lustre prices live in
trainstack/prices.py (FSX_LUSTRE_PRICES, us-east-1); a Region without such a table prints its file system
as not priced.

Free while idle, so not priced here (each service's pricing page): Step Functions (per state
transition), AWS Batch (no charge of its own), EventBridge rules on AWS service events and schedules,
SNS topics (per request), Lambda (per request), IAM, SSM standard parameters, SageMaker model package
groups, VPCs, subnets, security groups and the S3 gateway endpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from types import MappingProxyType

from trainstack.prices import FSX_LUSTRE_PRICES, FsxLustrePriceTable

PRICES_AS_OF = date(2026, 12, 5)


@dataclass(frozen=True)
class InfraPriceTable:
    region: str
    # https://aws.amazon.com/privatelink/pricing/
    interface_endpoint_az_hour: float  # one interface endpoint in one AZ
    interface_endpoint_gb: float  # data processed, first PB a month
    # https://aws.amazon.com/vpc/pricing/
    nat_gateway_hour: float
    nat_gateway_gb: float  # data processed
    public_ipv4_hour: float  # every public IPv4 address, the NAT gateway's included (since 2024-02-01)
    # https://aws.amazon.com/cloudwatch/pricing/
    dashboard_month: float  # the free tier's 3 dashboards are per account: not subtracted
    alarm_metric_month: float  # standard resolution; a metric math alarm counts each metric it reads
    logs_ingestion_gb: float
    logs_storage_gb_month: float
    # https://aws.amazon.com/kms/pricing/
    kms_key_month: float  # customer managed key; automatic rotation's first two rotations included
    kms_requests_per_10k: float
    # https://aws.amazon.com/secrets-manager/pricing/
    secret_month: float
    # https://aws.amazon.com/dynamodb/pricing/on-demand/
    dynamodb_storage_gb_month: float  # on-demand tables bill storage and requests only
    # https://aws.amazon.com/s3/pricing/
    s3_standard_gb_month: float  # first 50 TB
    # https://aws.amazon.com/ecr/pricing/
    ecr_storage_gb_month: float
    # trainstack/prices.py (https://aws.amazon.com/fsx/lustre/pricing/); None: not priced in this Region
    fsx_lustre: FsxLustrePriceTable | None

    @property
    def as_of(self) -> date:
        return PRICES_AS_OF


def _table(region: str, **prices: float) -> InfraPriceTable:
    """The prices that are the same in every Region recorded here, plus the Region's own."""
    same_everywhere = {
        "interface_endpoint_gb": 0.01,
        "public_ipv4_hour": 0.005,
        "dashboard_month": 3.00,
        "alarm_metric_month": 0.10,
        "logs_storage_gb_month": 0.03,
        "kms_key_month": 1.00,
        "kms_requests_per_10k": 0.03,
        "secret_month": 0.40,
        "s3_standard_gb_month": 0.023,
        "ecr_storage_gb_month": 0.10,
    }
    fsx = FSX_LUSTRE_PRICES if FSX_LUSTRE_PRICES.region == region else None
    return InfraPriceTable(region=region, fsx_lustre=fsx, **(same_everywhere | prices))


_US = {
    "interface_endpoint_az_hour": 0.01,
    "nat_gateway_hour": 0.045,
    "nat_gateway_gb": 0.045,
    "logs_ingestion_gb": 0.50,
    "dynamodb_storage_gb_month": 0.25,
}

INFRA_PRICES: MappingProxyType[str, InfraPriceTable] = MappingProxyType(
    {
        "us-east-1": _table("us-east-1", **_US),
        "us-east-2": _table("us-east-2", **_US),
        "us-west-2": _table("us-west-2", **_US),
        "eu-west-1": _table(
            "eu-west-1",
            interface_endpoint_az_hour=0.011,
            nat_gateway_hour=0.048,
            nat_gateway_gb=0.048,
            logs_ingestion_gb=0.57,
            dynamodb_storage_gb_month=0.283,
        ),
    }
)
