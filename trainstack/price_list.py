"""SageMaker training prices from the AWS Price List API, where credentials allow (`trainstack plan`).

`pricing:GetProducts` (botocore's `pricing` model) with ServiceCode `AmazonSageMaker` and TERM_MATCH filters
on the product's `regionCode`, `instanceName` and `platoinstancetype` (`Training`: SageMaker prices the same
instance type per use, Training, Hosting, Studio...; the attribute and its values as public Price List clients
use them, assumed). Each PriceList item is a JSON document: the OnDemand term's price dimension per hour in
USD, dated by the term's `effectiveDate`. The API is served from us-east-1 (also eu-central-1 and
ap-south-1), whatever region it prices.

Without credentials, or when the API cannot be read, the dated offline table (trainstack/prices.py) stands in,
and the prices say so. A type the API does not price keeps the offline table's figure for the same region,
with that figure's own date and source; a type neither prices stays unpriced.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import date
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from trainstack.prices import InstancePrice, TrainingPrices, offline_training_prices
from trainstack.service_quotas import QUICK

SERVICE_CODE = "AmazonSageMaker"
PRICE_LIST_ENDPOINT_REGION = "us-east-1"
TRAINING_USE = "Training"
API_ORIGIN = "the AWS Price List API (pricing:GetProducts)"


def pricing_client() -> Any:
    return boto3.client("pricing", region_name=PRICE_LIST_ENDPOINT_REGION, config=QUICK)


def read_training_prices(client: Any, region: str, instance_types: Iterable[str]) -> dict[str, InstancePrice]:
    """The API's on-demand training price per type in `region` (types it has no price for are left out)."""
    found = {}
    for name in dict.fromkeys(instance_types):
        response = client.get_products(
            ServiceCode=SERVICE_CODE,
            Filters=[
                {"Type": "TERM_MATCH", "Field": "regionCode", "Value": region},
                {"Type": "TERM_MATCH", "Field": "instanceName", "Value": name},
                {"Type": "TERM_MATCH", "Field": "platoinstancetype", "Value": TRAINING_USE},
            ],
            MaxResults=100,
        )
        for item in response.get("PriceList", []):
            price = _on_demand_hourly(json.loads(item) if isinstance(item, str) else item, region)
            if price is not None:
                found[name] = price
                break
    return found


def plan_prices(
    region: str | None,
    instance_types: Iterable[str],
    client_factory: Callable[[], Any] | None = None,
) -> TrainingPrices:
    """The API's prices where credentials allow, else (or on any error) the offline table, saying which."""
    offline = offline_training_prices(region)
    instance_types = list(dict.fromkeys(instance_types))
    if region is None:
        return offline
    if boto3.Session().get_credentials() is None:
        return _offline_because(offline, "no AWS credentials, so the Price List API was not read")
    try:
        client = (client_factory or pricing_client)()
        read = read_training_prices(client, region, instance_types)
    except (BotoCoreError, ClientError) as error:
        reason = str(error).rstrip(".")
        return _offline_because(offline, f"the Price List API could not be read: {reason}")
    missing = [name for name in instance_types if name not in read and name in offline.entries]
    origin = API_ORIGIN if not missing else f"{API_ORIGIN}, and {offline.origin} where it has no price"
    return TrainingPrices(region, origin, {**offline.entries, **read})


def _offline_because(offline: TrainingPrices, reason: str) -> TrainingPrices:
    return TrainingPrices(offline.region, f"{offline.origin} ({reason})", offline.entries)


def _on_demand_hourly(document: dict[str, Any], region: str) -> InstancePrice | None:
    for term in document.get("terms", {}).get("OnDemand", {}).values():
        for dimension in term.get("priceDimensions", {}).values():
            usd = float(dimension.get("pricePerUnit", {}).get("USD", 0) or 0)
            if usd > 0 and dimension.get("unit", "").lower().startswith("hr"):
                sku = document.get("product", {}).get("sku", "?")
                effective = date.fromisoformat(term["effectiveDate"][:10])
                return InstancePrice(usd, effective, f"AWS Price List API, {region}, SKU {sku}")
    return None
