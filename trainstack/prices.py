"""Dated price data: the one place trainstack keeps what AWS charges (FSx for Lustre, SageMaker training).

FSx for Lustre, US East (N. Virginia), SSD storage, USD per GB-month, from the AWS pricing page
below. AWS bills the provisioned StorageCapacity figure at the GB-month rate: its own scratch
example prices a 1,200 GiB SCRATCH_2 file system at 1,200 x $0.140 = $168 a month.

Checked on the date below: the page itself cannot be fetched from the build machines, so the
figures are the ones recorded in DESIGN.md; $0.140 (SCRATCH_2) and $0.145 (PERSISTENT_2 at
125 MB/s/TiB) match independent cost write-ups, the other three tiers were not re-checked.
Data compression, backups and data transfer are not included.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from types import MappingProxyType
from typing import Literal

DeploymentType = Literal["SCRATCH_2", "PERSISTENT_2"]


@dataclass(frozen=True)
class FsxLustrePriceTable:
    region: str
    as_of: date
    source_url: str
    # (deployment type, PerUnitStorageThroughput MB/s/TiB or None for scratch) -> USD per GB-month
    usd_per_gb_month: MappingProxyType[tuple[DeploymentType, int | None], float]

    def monthly_cost_usd(self, deployment_type: DeploymentType, per_unit: int | None, gib: int) -> float:
        """Storage charge of one month for a file system, rounded to cents."""
        return round(gib * self.usd_per_gb_month[(deployment_type, per_unit)], 2)


FSX_LUSTRE_PRICES = FsxLustrePriceTable(
    region="us-east-1",
    as_of=date(2026, 11, 29),
    source_url="https://aws.amazon.com/fsx/lustre/pricing/",
    usd_per_gb_month=MappingProxyType(
        {
            ("SCRATCH_2", None): 0.140,
            ("PERSISTENT_2", 125): 0.145,
            ("PERSISTENT_2", 250): 0.210,
            ("PERSISTENT_2", 500): 0.340,
            ("PERSISTENT_2", 1000): 0.600,
        }
    ),
)


@dataclass(frozen=True)
class TrainingPriceTable:
    """SageMaker training, on-demand, USD per instance-hour (billed per second)."""

    region: str
    as_of: date
    source_url: str
    usd_per_instance_hour: MappingProxyType[str, float]

    def hourly_usd(self, instance_type: str) -> float | None:
        """None for a type with no recorded price: the planner reports no cost rather than a wrong one."""
        return self.usd_per_instance_hour.get(instance_type)


# SageMaker training on-demand list prices in US East (N. Virginia), as published on the page below
# before AWS's June 2025 price reduction for P4/P5 instances; they could not be re-checked from the
# build machines (no internet), so costs computed from them are upper bounds for P4/P5. Types without a
# figure we could vouch for (ml.p5e, ml.p5en, ml.g6e) are left out.
SAGEMAKER_TRAINING_PRICES = TrainingPriceTable(
    region="us-east-1",
    as_of=date(2025, 5, 31),
    source_url="https://aws.amazon.com/sagemaker/pricing/",
    usd_per_instance_hour=MappingProxyType(
        {
            "ml.p3.16xlarge": 28.152,
            "ml.p3dn.24xlarge": 35.894,
            "ml.p4d.24xlarge": 37.688,
            "ml.p4de.24xlarge": 47.110,
            "ml.p5.48xlarge": 113.068,
            "ml.g5.12xlarge": 7.090,
            "ml.g5.48xlarge": 20.360,
            "ml.m5.xlarge": 0.230,
            "ml.c5.4xlarge": 0.952,
        }
    ),
)


HOURS_PER_MONTH = 730  # AWS pricing pages' month
# The infrastructure a deployment keeps running (endpoints, NAT, dashboards, alarms, keys...), per Region:
# trainstack/infra_prices.py.
