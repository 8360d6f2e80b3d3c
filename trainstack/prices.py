"""Dated price data: the one place trainstack keeps what AWS charges.

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
