"""What `compliance: control-tower` costs on top of `none` for a given app (README, "Deploying into a
governed account"; `make synth` and `check-config` print cost_summary's line), at the config Region's
dated prices (trainstack/infra_prices.py)."""

from __future__ import annotations

from dataclasses import dataclass

from trainstack.config import Settings
from trainstack.governance import CONTROL_TOWER
from trainstack.idle_cost import rate
from trainstack.idle_resources import control_tower_endpoint, control_tower_log_keys
from trainstack.infra_prices import INFRA_PRICES, InfraPriceTable
from trainstack.prices import HOURS_PER_MONTH


@dataclass(frozen=True)
class CostItem:
    what: str
    count: int
    monthly_usd: float

    @property
    def total_usd(self) -> float:
        return round(self.count * self.monthly_usd, 2)


def governed_fixed_costs(settings: Settings, prices: InfraPriceTable | None = None) -> list[CostItem]:
    """The fixed monthly charges control-tower adds to `settings`' app (compared with compliance: none), at
    `prices` (default: the config Region's; cost_summary checks that the Region is priced)."""
    prices = prices or INFRA_PRICES[settings.region]
    items = [
        CostItem("KMS key for the buckets", 1, prices.kms_key_month),
        CostItem(
            "KMS keys for log groups (one per stack with logs)",
            control_tower_log_keys(settings),
            prices.kms_key_month,
        ),
    ]
    if control_tower_endpoint(settings):
        endpoint_month = round(prices.interface_endpoint_az_hour * HOURS_PER_MONTH, 2)
        items.append(CostItem("EC2 interface endpoint", 1, endpoint_month))
    return items


def cost_summary(settings: Settings) -> str:
    """One line for `make synth`: what control-tower adds (or would add) per month, and what grows by use."""
    prices = INFRA_PRICES.get(settings.region)
    if prices is None:
        return f"compliance: {settings.compliance}; what control-tower costs: {settings.region} is not priced"
    items = governed_fixed_costs(settings, prices)
    total = sum(item.total_usd for item in items)
    parts = ", ".join(f"{item.count} x {item.what} ${item.monthly_usd:.2f}" for item in items if item.count)
    by_use = (
        f"plus by use: log storage kept 365 days {rate(prices.logs_storage_gb_month)}/GB-month, "
        f"KMS requests {rate(prices.kms_requests_per_10k)}/10,000"
    )
    if settings.compliance == CONTROL_TOWER:
        head = f"compliance: control-tower adds ${total:.2f}/month over none"
    else:
        head = f"compliance: none; control-tower would add ${total:.2f}/month"
    return f"{head} ({parts}; {by_use}; {prices.region} prices of {prices.as_of})"
