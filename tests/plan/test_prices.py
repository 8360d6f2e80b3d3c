"""Prices per region with their dates (trainstack/prices.py), read from the AWS Price List API where
credentials allow (trainstack/price_list.py, stubbed per botocore's `pricing` model) and named where
missing: `trainstack plan` says which it used, and never prices one region with another's figures."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import boto3
import pytest
from botocore.stub import ANY, Stubber

from tests.conftest import DEFAULT_CONFIG
from trainstack import price_list
from trainstack.cli import main as trainstack
from trainstack.prices import OFFLINE_TRAINING_PRICES, offline_training_prices

EU_CONFIG = Path(__file__).resolve().parents[2] / "config" / "examples" / "eu-west-1.yaml"
PROFILE = ["plan", "--profile", "llama-7b-smp", "--config", str(DEFAULT_CONFIG), "--json"]


def price_document(instance_type: str, usd: str, effective: str) -> str:
    """One PriceList item as GetProducts returns it: a JSON document per product (aws_v1)."""
    sku = "SKU" + instance_type.replace(".", "")
    term = {
        "sku": sku,
        "effectiveDate": effective,
        "offerTermCode": "JRTCKXETXF",
        "priceDimensions": {
            f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                "unit": "Hrs",
                "pricePerUnit": {"USD": usd},
                "description": f"${usd} per Training {instance_type} in US East (N. Virginia)",
            }
        },
    }
    product = {
        "productFamily": "ML Instance",
        "attributes": {
            "instanceName": instance_type,
            "regionCode": "us-east-1",
            "platoinstancetype": "Training",
        },
        "sku": sku,
    }
    return json.dumps({"product": product, "terms": {"OnDemand": {f"{sku}.JRTCKXETXF": term}}})


def stubbed_pricing(answers: dict[str, list[str]]):
    client = boto3.client("pricing", region_name="us-east-1")
    stubber = Stubber(client)
    for instance_type, items in answers.items():
        expected = {
            "ServiceCode": "AmazonSageMaker",
            "Filters": [
                {"Type": "TERM_MATCH", "Field": "regionCode", "Value": "us-east-1"},
                {"Type": "TERM_MATCH", "Field": "instanceName", "Value": instance_type},
                {"Type": "TERM_MATCH", "Field": "platoinstancetype", "Value": "Training"},
            ],
            "MaxResults": ANY,
        }
        stubber.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": items}, expected)
    stubber.activate()
    return client, stubber


def test_every_offline_price_has_its_date_and_source_and_none_predates_the_june_2025_cut_for_p4_p5():
    for region, entries in OFFLINE_TRAINING_PRICES.items():
        for name, entry in entries.items():
            assert entry.usd_per_hour > 0 and entry.source, (region, name)
            if name.startswith(("ml.p4", "ml.p5")):
                assert entry.as_of > date(2025, 6, 30), (region, name)
    old_p5 = 113.068  # the table's figure before AWS's June 2025 P4/P5 reduction
    assert offline_training_prices("us-east-1").hourly_usd("ml.p5.48xlarge") < 0.6 * old_p5


def test_plan_reads_the_price_list_api_where_credentials_allow_and_says_so(capsys, monkeypatch):
    client, stubber = stubbed_pricing(
        {
            "ml.p5.48xlarge": [price_document("ml.p5.48xlarge", "60.0000000000", "2026-11-01T00:00:00Z")],
            "ml.p4de.24xlarge": [],  # the API has no price: the offline table's stands, named
        }
    )
    monkeypatch.setattr(price_list, "pricing_client", lambda: client)
    assert trainstack(PROFILE) == 0
    stubber.assert_no_pending_responses()
    document = json.loads(capsys.readouterr().out)
    prices = document["assumptions"]["prices"]
    assert prices["region"] == "us-east-1"
    assert prices["origin"].startswith("the AWS Price List API (pricing:GetProducts), and trainstack's dated")
    p5 = prices["usd_per_instance_hour"]["ml.p5.48xlarge"]
    assert (p5["usd"], p5["as_of"]) == (60.0, "2026-11-01") and "Price List API, us-east-1" in p5["source"]
    offline_p4de = offline_training_prices("us-east-1").entries["ml.p4de.24xlarge"]
    assert prices["usd_per_instance_hour"]["ml.p4de.24xlarge"]["usd"] == offline_p4de.usd_per_hour
    first = document["plans"][0]
    assert first["cost_usd"] == pytest.approx(first["hours"] * 2 * 60.0, rel=1e-3)


def test_without_credentials_plan_uses_the_dated_offline_table_and_says_why(capsys, monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr(price_list, "pricing_client", lambda: (_ for _ in ()).throw(AssertionError("called")))
    assert trainstack(PROFILE[:-1]) == 0
    out = capsys.readouterr().out
    assert (
        "on-demand SageMaker training prices in us-east-1 from trainstack's dated offline table "
        "(trainstack/prices.py) (no AWS credentials, so the Price List API was not read): "
        "ml.p5.48xlarge $63.296/h as of 2026-09-01, ml.p4de.24xlarge $31.564/h as of 2026-07-01" in out
    )


def test_a_region_without_prices_is_named_unpriced_never_priced_as_us_east_1(capsys):
    """Before: every region was priced with us-east-1's figures of 2025-05-31."""
    assert trainstack(["plan", "--profile", "llama-7b-smp", "--config", str(EU_CONFIG)]) == 0
    out = capsys.readouterr().out
    assert "no cost: no price recorded for ml.p5.48xlarge in eu-west-1" in out
    assert "no price for ml.p5.48xlarge, ml.p4de.24xlarge in eu-west-1 (unpriced: no cost shown)" in out
    assert "$" not in out.split("Goodput")[0].split("Assumed MFU")[0]
