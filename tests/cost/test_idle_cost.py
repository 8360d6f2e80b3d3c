"""The idle monthly cost that `make synth` and `trainstack check-config` print: counted from the synthesized
templates, equal to what check-config reads from the config, priced in the config's own Region."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import CDK_CONTEXT, REPO_ROOT
from trainstack.config_loading import load_settings
from trainstack.idle_cost import BilledResources, count_in_templates, idle_cost, idle_cost_of_templates
from trainstack.idle_resources import billed_resources
from trainstack.infra_prices import INFRA_PRICES
from trainstack.prices import FSX_LUSTRE_PRICES

SHIPPED_CONFIGS = sorted([*REPO_ROOT.glob("config/*.yaml"), *REPO_ROOT.glob("config/examples/*.yaml")])
# What changes a count and no shipped config has: a NAT and its address, queue mode without teams, a
# customer managed key, no file system. control-tower's keys and EC2 endpoint are held to its templates in
# tests/infra/test_governed.py, which synthesizes them anyway (with the Control Tower rules: ~20 s more).
VARIANTS = {
    "NAT, queue mode, customer managed key, no file system": {
        "network": {"egress": "nat"},
        "queue": {"enabled": True, "shares": {"teamA": 2, "teamB": 1}},
        "encryption": {"customer_managed_key": True},
        "fsx": {"enabled": False, "throughput_mbps": None},
    },
}


def templates_of(assembly) -> list[dict]:
    return [json.loads(Path(stack.template_full_path).read_text()) for stack in assembly.stacks]


def check_config_output(capsys, config: Path) -> str:
    from trainstack.cli import main

    assert main(["check-config", str(config)]) == 0
    return capsys.readouterr().out


def test_teams_idle_cost_is_the_sum_of_the_templates_billed_resources(teams_app, capsys):
    """config/examples/teams.yaml: each billed resource of the synthesized templates, read here by type and
    property, times its dated us-east-1 price, is the total that both synth's line and check-config print."""
    settings, _, assembly = teams_app
    resources = [body for template in templates_of(assembly) for body in template["Resources"].values()]

    def of_type(kind: str) -> list[dict]:
        return [body.get("Properties", {}) for body in resources if body["Type"] == kind]

    interface_endpoints = [p for p in of_type("AWS::EC2::VPCEndpoint") if p["VpcEndpointType"] == "Interface"]
    endpoint_azs = sum(len(p["SubnetIds"]) for p in interface_endpoints)
    [file_system] = of_type("AWS::FSx::FileSystem")
    lustre = file_system["LustreConfiguration"]
    alarm_metrics = sum(
        sum("MetricStat" in query for query in p["Metrics"]) if "Metrics" in p else 1
        for p in of_type("AWS::CloudWatch::Alarm")
    )
    prices = INFRA_PRICES["us-east-1"]
    expected = round(
        endpoint_azs * 730 * prices.interface_endpoint_az_hour
        + file_system["StorageCapacity"]
        * FSX_LUSTRE_PRICES.usd_per_gb_month[(lustre["DeploymentType"], lustre["PerUnitStorageThroughput"])]
        + len(of_type("AWS::CloudWatch::Dashboard")) * prices.dashboard_month
        + alarm_metrics * prices.alarm_metric_month
        + len(of_type("AWS::KMS::Key")) * prices.kms_key_month,
        2,
    )
    # Two pipelines: 2 dashboards, 2 x 14 alarm metrics (queue mode), 2 topic keys; 5 endpoints, 1,200 GiB.
    assert (endpoint_azs, len(of_type("AWS::KMS::Key")), alarm_metrics) == (5, 2, 28)
    assert expected == 36.50 + 720.00 + 6.00 + 2.80 + 2.00
    synth_cost = idle_cost_of_templates(templates_of(assembly), settings.region)
    assert synth_cost.total_usd == expected
    printed = check_config_output(capsys, REPO_ROOT / "config/examples/teams.yaml")
    head = f"idle monthly cost in us-east-1 (us-east-1 list prices of {prices.as_of}): ${expected:,.2f}"
    assert head in printed.splitlines()
    assert "\n".join(synth_cost.render()) in printed


@pytest.fixture(scope="module")
def synthesized_variants(tmp_path_factory, make_settings_module):
    """The shipped configs that the session fixtures do not synthesize, and VARIANTS, without cdk-nag."""
    import aws_cdk as cdk

    from stacks.app_builder import build_app

    apps = {}
    settings_by_name = {
        **{
            config.name: load_settings(str(config))
            for config in SHIPPED_CONFIGS
            if config.name not in ("default.yaml", "teams.yaml")
        },
        **{name: make_settings_module(overrides) for name, overrides in VARIANTS.items()},
    }
    for name, settings in settings_by_name.items():
        app = cdk.App(outdir=str(tmp_path_factory.mktemp("variant")), context=CDK_CONTEXT)
        build_app(app, settings, nag=False)
        apps[name] = (settings, templates_of(app.synth()))
    return apps


@pytest.fixture(scope="module")
def make_settings_module():
    from tests.conftest import deep_merge, default_config_data
    from trainstack.config_loading import parse_settings

    return lambda overrides: parse_settings(
        deep_merge(default_config_data(), overrides), {}, source="test config"
    )


def test_check_config_counts_what_the_templates_hold_for_every_shipped_config_and_variant(
    default_app, teams_app, synthesized_variants
):
    """check-config reads the config, synth the templates: the same resources, item by item, priced."""
    apps = {
        "default.yaml": (default_app[0], templates_of(default_app[2])),
        "teams.yaml": (teams_app[0], templates_of(teams_app[2])),
        **synthesized_variants,
    }
    assert sorted(name for name in apps if name.endswith(".yaml")) == [c.name for c in SHIPPED_CONFIGS]
    for name, (settings, templates) in apps.items():
        counted = count_in_templates(templates)
        assert counted.unpriced == (), name
        assert billed_resources(settings) == counted, name
    nat = count_in_templates(apps["NAT, queue mode, customer managed key, no file system"][1])
    # 1 NAT and its address, no endpoint, no file system; 14 alarm metrics (queue mode); topic + run-data key.
    assert (nat.nat_gateways, nat.public_ipv4_addresses, nat.interface_endpoint_azs, nat.file_systems) == (
        1,
        1,
        0,
        (),
    )
    assert (nat.alarm_metrics, nat.kms_keys) == (14, 2)


def test_a_region_without_prices_is_named_not_priced_with_another_regions_figure():
    resources = BilledResources(interface_endpoint_azs=5, dashboards=1)
    cost = idle_cost(resources, "ap-southeast-2")
    assert cost.total_usd is None
    assert cost.render() == [
        "idle monthly cost: ap-southeast-2 is not priced (trainstack has dated prices for eu-west-1, "
        "us-east-1, us-east-2, us-west-2 only: trainstack/infra_prices.py)"
    ]


def test_eu_west_1_prices_its_endpoints_at_its_own_rate_and_names_its_file_system_not_priced():
    settings = load_settings(str(REPO_ROOT / "config/examples/eu-west-1.yaml"))
    lines = idle_cost(billed_resources(settings), settings.region).render()
    assert lines[0].endswith("not known (an item below is not priced)")
    assert "  5 interface endpoint-AZs x 730 h at $0.011/h: $40.15" in lines
    file_system = "SCRATCH_2, 4,800 GiB (FSx for Lustre is not priced in eu-west-1): not priced"
    assert f"  FSx for Lustre {file_system}" in lines


def test_a_resource_type_without_a_rule_makes_the_total_unknown():
    template = {
        "Resources": {
            "Db": {"Type": "AWS::RDS::DBInstance", "Properties": {}},
            "Table": {"Type": "AWS::DynamoDB::Table", "Properties": {"BillingMode": "PROVISIONED"}},
            "Key": {"Type": "AWS::KMS::Key", "Properties": {}},
            "Fast": {"Type": "AWS::CloudWatch::Alarm", "Properties": {"MetricName": "x", "Period": 10}},
        }
    }
    cost = idle_cost_of_templates([template], "us-east-1")
    assert cost.total_usd is None
    unpriced = "AWS::CloudWatch::Alarm, AWS::DynamoDB::Table, AWS::RDS::DBInstance"
    assert f"  resources of types trainstack does not price: {unpriced}: not priced" in cost.render()
