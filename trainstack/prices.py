"""Dated price data: the one place trainstack keeps what AWS charges (FSx for Lustre, SageMaker training).

SageMaker training: per region and per instance type, each figure with its date and source; a region or type
without one is unpriced (the planner and the cost cap say so; no other region's figure stands in).
`trainstack plan` reads the AWS Price List API instead where credentials allow (trainstack/price_list.py).

FSx for Lustre, US East (N. Virginia), SSD storage, USD per GB-month, from the AWS pricing page
below. AWS bills the provisioned StorageCapacity figure at the GB-month rate: its own scratch
example prices a 1,200 GiB SCRATCH_2 file system at 1,200 x $0.140 = $168 a month.

Checked on the date below: the page itself cannot be fetched from the build machines, so the
figures are the ones recorded in DESIGN.md; $0.140 (SCRATCH_2) and $0.145 (PERSISTENT_2 at
125 MB/s/TiB) match independent cost write-ups, the other three tiers were not re-checked.
Data compression, backups and data transfer are not included.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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
class InstancePrice:
    """One SageMaker training on-demand price: USD per instance-hour (billed per second), when and where
    it was read."""

    usd_per_hour: float
    as_of: date
    source: str


@dataclass(frozen=True)
class TrainingPrices:
    """SageMaker training on-demand prices in one region, from one place: the AWS Price List API
    (trainstack/price_list.py) or this module's dated table. A type without an entry is unpriced there: the
    planner reports no cost rather than another region's."""

    region: str | None  # None: the config names none; nothing is priced
    origin: str  # where the figures come from, for the plan's and the report's footnotes
    entries: Mapping[str, InstancePrice]

    def hourly_usd(self, instance_type: str) -> float | None:
        entry = self.entries.get(instance_type)
        return entry and entry.usd_per_hour

    def as_dict(self) -> dict:
        return {
            "region": self.region,
            "origin": self.origin,
            "usd_per_instance_hour": {
                name: {"usd": entry.usd_per_hour, "as_of": entry.as_of.isoformat(), "source": entry.source}
                for name, entry in self.entries.items()
            },
        }

    def sentence(self, instance_types: Iterable[str] = ()) -> str:
        """Where the prices of `instance_types` come from, each with its date; the unpriced named."""
        names = list(dict.fromkeys(instance_types)) or sorted(self.entries)
        priced = [
            f"{name} ${self.entries[name].usd_per_hour:,.3f}/h as of {self.entries[name].as_of}"
            for name in names
            if name in self.entries
        ]
        unpriced = [name for name in names if name not in self.entries]
        text = f"on-demand SageMaker training prices in {self.region} from {self.origin}"
        if priced:
            text += f": {', '.join(priced)}"
        if unpriced:
            text += f"; no price for {', '.join(unpriced)} in {self.region} (unpriced: no cost shown)"
        return text


# Sources of the offline table (no internet on the build machines: each figure is quoted from where it was
# read, and dated by it).
_BEFORE_THE_CUT = (
    "SageMaker pricing page (https://aws.amazon.com/sagemaker/pricing/), us-east-1, as recorded before AWS's "
    "June 2025 P4/P5 price reduction, which left this type unchanged"
)
_STUDIO_LIST = (
    "AWS Price List API (AmazonSageMaker), us-west-2, effective 2026-09-01, as quoted by a public repository "
    "for Studio JupyterLab usage; SageMaker lists the same hourly rate per type across its uses (assumed)"
)
_TRAINING_LAUNCHER = (
    "a public SageMaker training launcher's us-east-1 price table (mid-2026): $47.110 before the June 2025 "
    "reduction less its 33 % P4 cut"
)
_SAME_IN_US_EAST_1 = "; us-east-1 and us-west-2 list the same SageMaker rates (assumed)"


def _price(usd: float, as_of: date, source: str) -> InstancePrice:
    return InstancePrice(usd, as_of, source)


_RECORDED = date(2025, 5, 31)
_SEPTEMBER_2026 = date(2026, 9, 1)
_JULY_2026 = date(2026, 7, 1)
_US_WEST_2 = {
    "ml.p4d.24xlarge": _price(25.251, _SEPTEMBER_2026, _STUDIO_LIST),
    "ml.p5.48xlarge": _price(63.296, _SEPTEMBER_2026, _STUDIO_LIST),
    "ml.g5.12xlarge": _price(7.090, _SEPTEMBER_2026, _STUDIO_LIST),
    "ml.g5.48xlarge": _price(20.360, _SEPTEMBER_2026, _STUDIO_LIST),
    "ml.m5.xlarge": _price(0.230, _SEPTEMBER_2026, _STUDIO_LIST),
}
# The catalog's other types (ml.p5e, ml.p5en, ml.g6e) have no figure we could vouch for: unpriced everywhere.
OFFLINE_TRAINING_PRICES: Mapping[str, Mapping[str, InstancePrice]] = MappingProxyType(
    {
        "us-east-1": MappingProxyType(
            {
                **{
                    name: _price(price.usd_per_hour, price.as_of, price.source + _SAME_IN_US_EAST_1)
                    for name, price in _US_WEST_2.items()
                },
                "ml.p4de.24xlarge": _price(31.564, _JULY_2026, _TRAINING_LAUNCHER),
                "ml.p3.16xlarge": _price(28.152, _RECORDED, _BEFORE_THE_CUT),
                "ml.p3dn.24xlarge": _price(35.894, _RECORDED, _BEFORE_THE_CUT),
                "ml.c5.4xlarge": _price(0.952, _RECORDED, _BEFORE_THE_CUT),
            }
        ),
        "us-west-2": MappingProxyType(dict(_US_WEST_2)),
    }
)
OFFLINE_ORIGIN = "trainstack's dated offline table (trainstack/prices.py)"


def offline_training_prices(region: str | None) -> TrainingPrices:
    """The offline table's prices for `region` (none for a region it does not cover)."""
    entries = OFFLINE_TRAINING_PRICES.get(region or "", MappingProxyType({}))
    return TrainingPrices(region, OFFLINE_ORIGIN, entries)


HOURS_PER_MONTH = 730  # AWS pricing pages' month
# The infrastructure a deployment keeps running (endpoints, NAT, dashboards, alarms, keys...), per Region:
# trainstack/infra_prices.py.
