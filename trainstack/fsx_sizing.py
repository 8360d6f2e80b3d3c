"""FSx for Lustre sizing: the cheapest file system that holds the dataset and reads it fast enough.

Units, used everywhere in trainstack:
- sizes in GiB (2**30 bytes), as FSx's StorageCapacity and the dataset size in config;
- throughput in MB/s with 1 MB = 10**6 bytes, as AWS states FSx throughput (MB/s per TiB,
  1 TiB = 1,024 GiB). Reading D GiB in an epoch of T s needs D * 2**30 / 10**6 / T MB/s.
  SageMaker's example (a 100 GB dataset read in a 30 s epoch needs about 3.3 GB/s) is in GB;
  100 GiB read in 30 s needs 3,579 MB/s.

FSx facts (Lustre user guide, "Performance characteristics of SSD and HDD storage classes" and
CreateFileSystem StorageCapacity / PerUnitStorageThroughput in the FSx API reference):
- SCRATCH_2 and PERSISTENT_2 (SSD): StorageCapacity 1,200 GiB, 2,400 GiB, then multiples of 2,400.
- Baseline throughput per TiB: SCRATCH_2 200 MB/s (burst 1,300); PERSISTENT_2 PerUnitStorageThroughput
  125, 250, 500 or 1000 MB/s. For PERSISTENT_2 that is the disk baseline; its network baseline is
  higher (320/640/1,300/2,600), so the disk figure is the one a full read of uncached data gets.
- RAM cache on the file servers, GiB per TiB: SCRATCH_2 6.7; PERSISTENT_2 3.4/6.8/13.7/27.3.
- AWS publishes no per-file-system maximum for these types, only an account quota (100,800 GiB
  of Lustre storage per Region by default in us-east-1, raised on request to petabytes), so
  trainstack plans file systems of at most MAX_STORAGE_CAPACITY_GIB.
EFA-enabled file systems (larger capacity steps) are not planned here.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Annotated, Any, Literal, get_args

from pydantic import Field, model_validator

from trainstack.base import StrictModel
from trainstack.prices import FSX_LUSTRE_PRICES, DeploymentType

BYTES_PER_GIB = 2**30
BYTES_PER_MB = 10**6
GIB_PER_TIB = 1024
FIRST_CAPACITIES_GIB = (1200, 2400)
CAPACITY_STEP_GIB = 2400
MAX_STORAGE_CAPACITY_GIB = 1_000_000
DEFAULT_ACCOUNT_QUOTA_GIB = 100_800
DEPLOYMENT_TYPES: tuple[DeploymentType, ...] = get_args(DeploymentType)


@dataclass(frozen=True)
class FsxTier:
    """One deployment type at one throughput per TiB."""

    deployment_type: DeploymentType
    per_unit_storage_throughput: int | None  # None: scratch has no such setting
    baseline_mbps_per_tib: int
    ram_cache_gib_per_tib: float

    def baseline_mbps(self, storage_capacity_gib: int) -> float:
        return storage_capacity_gib * self.baseline_mbps_per_tib / GIB_PER_TIB

    def monthly_cost_usd(self, storage_capacity_gib: int) -> float:
        return FSX_LUSTRE_PRICES.monthly_cost_usd(
            self.deployment_type, self.per_unit_storage_throughput, storage_capacity_gib
        )

    @property
    def label(self) -> str:
        if self.per_unit_storage_throughput is None:
            return self.deployment_type
        return f"{self.deployment_type} at {self.per_unit_storage_throughput} MB/s/TiB"


TIERS: tuple[FsxTier, ...] = (
    FsxTier("SCRATCH_2", None, 200, 6.7),
    FsxTier("PERSISTENT_2", 125, 125, 3.4),
    FsxTier("PERSISTENT_2", 250, 250, 6.8),
    FsxTier("PERSISTENT_2", 500, 500, 13.7),
    FsxTier("PERSISTENT_2", 1000, 1000, 27.3),
)
LARGEST_CAPACITY_GIB = (MAX_STORAGE_CAPACITY_GIB // CAPACITY_STEP_GIB) * CAPACITY_STEP_GIB


class FsxSizingError(ValueError):
    """No file system meets the need; str() is one sentence, `parameter` names the input at fault."""

    def __init__(self, message: str, parameter: str) -> None:
        super().__init__(message)
        self.parameter = parameter

    def named(self, name: str) -> FsxSizingError:
        """The same error with the caller's name for the parameter (config field, CLI flag) in front."""
        return FsxSizingError(f"{name}: {self}", self.parameter)


@dataclass(frozen=True)
class FsxPlan:
    deployment_type: DeploymentType
    storage_capacity_gib: int
    per_unit_storage_throughput: int | None
    throughput_mbps: float  # baseline of this configuration
    ram_cache_gib: float
    monthly_cost_usd: float
    required_mbps: float  # the need it was sized for (0 when only capacity was asked for)
    dataset_gib: float

    @property
    def above_default_quota(self) -> bool:
        """Larger than the default per-account Lustre storage quota: a quota increase is needed first."""
        return self.storage_capacity_gib > DEFAULT_ACCOUNT_QUOTA_GIB

    @property
    def tier(self) -> FsxTier:
        key = (self.deployment_type, self.per_unit_storage_throughput)
        return next(tier for tier in TIERS if (tier.deployment_type, tier.per_unit_storage_throughput) == key)

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "price_region": FSX_LUSTRE_PRICES.region,
            "prices_as_of": FSX_LUSTRE_PRICES.as_of.isoformat(),
            "price_source": FSX_LUSTRE_PRICES.source_url,
        }


def epoch_throughput_mbps(dataset_gib: float, epoch_seconds: float) -> float:
    """MB/s needed to read the whole dataset once in epoch_seconds."""
    return dataset_gib * BYTES_PER_GIB / BYTES_PER_MB / epoch_seconds


def size_fsx(
    dataset_gib: float,
    *,
    throughput_mbps: float | None = None,
    epoch_seconds: float | None = None,
    deployment_type: str | None = None,
    max_capacity_gib: int = LARGEST_CAPACITY_GIB,
) -> FsxPlan:
    """The cheapest valid configuration with capacity >= dataset and baseline >= the need.

    The need is throughput_mbps, or the dataset read once per epoch_seconds, or nothing (capacity
    only). Ties in cost go to the smaller capacity, then to the order of TIERS. Capacities stay at
    or below max_capacity_gib (a valid capacity).
    """
    _check_positive(dataset_gib, "dataset_gib", "a size in GiB")
    if throughput_mbps is not None and epoch_seconds is not None:
        raise FsxSizingError("give throughput_mbps or epoch_seconds, not both", "throughput_mbps")
    if throughput_mbps is not None:
        _check_positive(throughput_mbps, "throughput_mbps", "a rate in MB/s")
        need, need_parameter = float(throughput_mbps), "throughput_mbps"
    elif epoch_seconds is not None:
        _check_positive(epoch_seconds, "epoch_seconds", "a duration in seconds")
        need, need_parameter = epoch_throughput_mbps(dataset_gib, epoch_seconds), "epoch_seconds"
    else:
        need, need_parameter = 0.0, "throughput_mbps"
    if deployment_type is not None and deployment_type not in DEPLOYMENT_TYPES:
        raise FsxSizingError(
            f"{deployment_type!r} is not a planned deployment type; use {' or '.join(DEPLOYMENT_TYPES)}",
            "deployment_type",
        )
    tiers = [tier for tier in TIERS if deployment_type in (None, tier.deployment_type)]
    if dataset_gib > max_capacity_gib:
        raise FsxSizingError(
            f"{dataset_gib:,g} GiB does not fit one file system of at most {MAX_STORAGE_CAPACITY_GIB:,} GiB "
            f"(largest valid capacity {max_capacity_gib:,} GiB)",
            "dataset_gib",
        )
    fastest = max(tiers, key=lambda tier: tier.baseline_mbps_per_tib)
    if need > fastest.baseline_mbps(max_capacity_gib):
        raise FsxSizingError(
            _too_fast(need, dataset_gib, epoch_seconds, fastest, max_capacity_gib), need_parameter
        )

    candidates = []
    for order, tier in enumerate(tiers):
        capacity = _smallest_capacity(tier, dataset_gib, need)
        if capacity > max_capacity_gib:
            continue  # this tier would need a file system larger than allowed
        cost = tier.monthly_cost_usd(capacity)
        candidates.append((cost, capacity, order, tier))
    cost, capacity, _, tier = min(candidates, key=lambda candidate: candidate[:3])
    return FsxPlan(
        deployment_type=tier.deployment_type,
        storage_capacity_gib=capacity,
        per_unit_storage_throughput=tier.per_unit_storage_throughput,
        throughput_mbps=tier.baseline_mbps(capacity),
        ram_cache_gib=round(capacity / GIB_PER_TIB * tier.ram_cache_gib_per_tib, 1),
        monthly_cost_usd=cost,
        required_mbps=need,
        dataset_gib=float(dataset_gib),
    )


def within_default_quota(plan: FsxPlan, deployment_type: str | None = None) -> FsxPlan | None:
    """For a plan above the default Lustre quota: the cheapest plan for the same need that fits under
    it (a faster tier on less storage), or None when none does."""
    try:
        return size_fsx(
            plan.dataset_gib,
            throughput_mbps=plan.required_mbps or None,
            deployment_type=deployment_type,
            max_capacity_gib=DEFAULT_ACCOUNT_QUOTA_GIB,
        )
    except FsxSizingError:
        return None


def summary(plan: FsxPlan) -> str:
    """One line: type, capacity, baseline and monthly cost with the prices' region and date."""
    prices = FSX_LUSTRE_PRICES
    return (
        f"{plan.tier.label}, {plan.storage_capacity_gib:,} GiB, {plan.throughput_mbps:,.0f} MB/s baseline, "
        f"${plan.monthly_cost_usd:,.2f}/month ({prices.region} prices of {prices.as_of})"
    )


def quota_warning(plan: FsxPlan, deployment_type: str | None = None) -> str | None:
    """None within the default quota; else one sentence with the cheapest plan that fits under it."""
    if not plan.above_default_quota:
        return None
    warning = (
        f"{plan.storage_capacity_gib:,} GiB is above the default {DEFAULT_ACCOUNT_QUOTA_GIB:,} GiB "
        "Lustre storage quota of an account and Region: ask AWS to raise it before deploying"
    )
    alternative = within_default_quota(plan, deployment_type)
    if alternative is None:
        return f"{warning}; no plan for this need fits under it."
    return f"{warning}, or take the cheapest plan under it: {summary(alternative)}."


class FsxSettings(StrictModel):
    enabled: bool = True
    # The need, as a rate or as the time one epoch may take to read the whole dataset: exactly one.
    throughput_mbps: Annotated[float | None, Field(gt=0)] = None
    epoch_seconds: Annotated[float | None, Field(gt=0)] = None
    deployment_type: Literal["SCRATCH_2", "PERSISTENT_2"] | None = None

    @model_validator(mode="after")
    def _one_need(self) -> FsxSettings:
        if self.enabled and (self.throughput_mbps is None) == (self.epoch_seconds is None):
            raise ValueError("set exactly one of throughput_mbps or epoch_seconds")
        return self


# Config field that carries each size_fsx parameter, for messages at config load.
_CONFIG_FIELDS = {
    "dataset_gib": "dataset.size_gib",
    "throughput_mbps": "fsx.throughput_mbps",
    "epoch_seconds": "fsx.epoch_seconds",
    "deployment_type": "fsx.deployment_type",
}


def plan_for(dataset_gib: float, fsx: FsxSettings) -> FsxPlan | None:
    """The plan for the config's dataset size and `fsx:` section (None when fsx.enabled is false); errors
    name the config field."""
    if not fsx.enabled:
        return None
    try:
        return size_fsx(
            dataset_gib,
            throughput_mbps=fsx.throughput_mbps,
            epoch_seconds=fsx.epoch_seconds,
            deployment_type=fsx.deployment_type,
        )
    except FsxSizingError as error:
        raise error.named(_CONFIG_FIELDS[error.parameter]) from None


def _smallest_capacity(tier: FsxTier, dataset_gib: float, need_mbps: float) -> int:
    """The least valid capacity meeting both needs, possibly beyond LARGEST_CAPACITY_GIB.

    Baselines are exact in floating point (GiB x MB/s / 1024) and so is need x 1024 / per-TiB at a
    baseline, so rounding up never takes one step too many or too few (the property tests check it).
    """
    least = max(dataset_gib, need_mbps * GIB_PER_TIB / tier.baseline_mbps_per_tib)
    if least <= FIRST_CAPACITIES_GIB[0]:
        return FIRST_CAPACITIES_GIB[0]
    return max(FIRST_CAPACITIES_GIB[1], math.ceil(least / CAPACITY_STEP_GIB) * CAPACITY_STEP_GIB)


def _too_fast(
    need: float, dataset_gib: float, epoch_seconds: float | None, fastest: FsxTier, max_capacity_gib: int
) -> str:
    most = fastest.baseline_mbps(max_capacity_gib)
    limit = (
        f"more than one file system of at most {MAX_STORAGE_CAPACITY_GIB:,} GiB can give "
        f"({fastest.label} reaches {most:,.0f} MB/s at {max_capacity_gib:,} GiB)"
    )
    if epoch_seconds is None:
        return f"{need:,.0f} MB/s is {limit}"
    shortest = _round_up_3_digits(epoch_throughput_mbps(dataset_gib, 1) / most)
    return (
        f"reading {dataset_gib:,g} GiB every {epoch_seconds:g} s needs {need:,.0f} MB/s, {limit}; "
        f"allow at least {shortest:g} s per epoch"
    )


def _round_up_3_digits(value: float) -> float:
    scale = 10 ** (2 - math.floor(math.log10(value)))
    return math.ceil(value * scale) / scale


def _check_positive(value: float, parameter: str, what: str) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise FsxSizingError(f"{value!r} is not {what} above 0", parameter)
