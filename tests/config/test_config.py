"""The config model: defaults, the file winning over the CDK environment, one-sentence errors naming
the field."""

from __future__ import annotations

import pytest

from tests.conftest import DEFAULT_CONFIG, NO_ENV, default_config_data
from trainstack.config_loading import ConfigError, load_settings, parse_settings


def error_for(overrides: dict, environ: dict | None = None) -> str:
    data = {**default_config_data(), **overrides}
    with pytest.raises(ConfigError) as raised:
        parse_settings(data, NO_ENV if environ is None else environ, source="my.yaml")
    message = str(raised.value)
    assert message.startswith("my.yaml: ") and message.endswith(".") and "\n" not in message
    return message


def test_default_config_loads_offline_without_credentials():
    settings = load_settings(DEFAULT_CONFIG, environ=NO_ENV)
    assert settings.account == "111111111111"
    assert settings.region == "us-east-1"
    assert settings.az_label == "us-east-1a"


def uncapped(data: dict) -> dict:
    """The config without cost caps: trainstack/prices.py prices only some regions, and a cap needs a price in
    the config's region (trainstack.cost_cap.check_cost_caps); these tests move the default config."""
    profiles = [{key: value for key, value in p.items() if key != "max_cost_usd"} for p in data["profiles"]]
    return {**data, "profiles": profiles}


def test_file_values_win_over_the_cdk_environment():
    """The CDK CLI sets CDK_DEFAULT_REGION=us-east-1 on a machine without AWS config: it must not move
    an eu-west-1 platform."""
    data = {**uncapped(default_config_data()), "region": "eu-west-1", "availability_zone": "eu-west-1b"}
    settings = parse_settings(
        data, {"CDK_DEFAULT_ACCOUNT": "222222222222", "CDK_DEFAULT_REGION": "us-east-1"}
    )
    assert (settings.account, settings.region) == ("111111111111", "eu-west-1")


def test_cdk_environment_fills_what_the_file_leaves_out():
    data = {k: v for k, v in uncapped(default_config_data()).items() if k not in ("account", "region")}
    settings = parse_settings(
        {**data, "availability_zone": None, "availability_zone_id": "euw1-az2"},
        {"CDK_DEFAULT_ACCOUNT": "222222222222", "CDK_DEFAULT_REGION": "eu-west-1"},
    )
    assert (settings.account, settings.region) == ("222222222222", "eu-west-1")


def test_region_follows_from_the_az_name_before_the_cdk_environment():
    data = {key: value for key, value in uncapped(default_config_data()).items() if key != "region"}
    settings = parse_settings(
        {**data, "availability_zone": "eu-west-1b"}, {"CDK_DEFAULT_REGION": "us-east-1"}
    )
    assert settings.region == "eu-west-1"


@pytest.mark.parametrize("region", ["us-east-9", "eu-middle-1", "US-EAST-1"])
def test_region_must_be_one_botocore_knows(region):
    message = error_for({"region": region, "availability_zone": None, "availability_zone_id": "use1-az4"})
    assert f"region: '{region}' is not an AWS Region known to botocore" in message
    assert "us-east-1, us-east-2" in message and "cn-north-1" in message


def test_regions_of_other_partitions_are_accepted():
    settings = parse_settings(
        {**uncapped(default_config_data()), "region": "us-gov-west-1", "availability_zone": "us-gov-west-1a"},
        NO_ENV,
    )
    assert settings.region == "us-gov-west-1"


def test_an_empty_profile_list_is_rejected():
    assert error_for({"profiles": []}) == (
        "my.yaml: profiles: give at least one training profile (see config/default.yaml)."
    )


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"account": "12345"}, "account: '12345' is not an AWS account id of 12 digits."),
        (
            {"availability_zone": "us-east-1"},
            "availability_zone: 'us-east-1' is not an AZ name like us-east-1a",
        ),
        (
            {"availability_zone": None, "availability_zone_id": "az4"},
            "availability_zone_id: 'az4' is not an AZ id like use1-az4.",
        ),
        ({"project": "Trainstack"}, "project: 'Trainstack' is not 2 to 21 lowercase letters"),
        ({"notification_emails": ["ml-team"]}, "notification_emails.0: 'ml-team' is not an email address"),
    ],
)
def test_format_errors_speak_in_words_not_regexes(overrides, words):
    message = error_for(overrides)
    assert words in message
    assert "^" not in message and "\\d" not in message


def test_unknown_key_names_it_and_lists_allowed_keys():
    message = error_for({"network": {"vpc_cidr": "10.0.0.0/16", "egres": "nat"}})
    assert "network.egres: unknown key" in message
    assert "egress, existing, vpc_cidr" in message


def test_top_level_unknown_key():
    assert "datasets: unknown key" in error_for({"datasets": {}})


def test_az_outside_region_is_rejected():
    message = error_for({"availability_zone": "us-west-2a"})
    assert "availability_zone 'us-west-2a' is not in region 'us-east-1'" in message


def test_az_id_outside_region_is_rejected():
    message = error_for({"availability_zone": None, "availability_zone_id": "usw2-az1"})
    assert "availability_zone_id 'usw2-az1' is not in region 'us-east-1'" in message
    assert "use1-az1" in message


def test_az_by_id_is_accepted():
    settings = parse_settings(
        {**default_config_data(), "availability_zone": None, "availability_zone_id": "use1-az4"}, NO_ENV
    )
    assert settings.az_label == "use1-az4"


def test_az_name_and_id_together_are_rejected():
    assert "exactly one of availability_zone" in error_for({"availability_zone_id": "use1-az4"})


@pytest.mark.parametrize("cidr", ["10.0.0.1/16", "10.0.0.0/33", "banana"])
def test_malformed_cidr_names_the_field(cidr):
    message = error_for({"network": {"vpc_cidr": cidr}})
    assert f"network.vpc_cidr: '{cidr}' is not an IPv4 CIDR block" in message


def test_cidr_prefix_out_of_range():
    assert "between /16 and /24" in error_for({"network": {"vpc_cidr": "10.0.0.0/8"}})


def test_egress_lists_allowed_values():
    assert "network.egress: Input should be 'endpoints' or 'nat'" in error_for({"network": {"egress": "igw"}})


def test_fsx_need_must_be_exactly_one():
    message = error_for({"fsx": {"throughput_mbps": 100, "epoch_seconds": 30}})
    assert "fsx: set exactly one of throughput_mbps or epoch_seconds" in message


def test_missing_account_without_environment():
    data = {key: value for key, value in default_config_data().items() if key != "account"}
    with pytest.raises(ConfigError, match="account and region must be set"):
        parse_settings(data, NO_ENV)


def test_unreadable_and_invalid_yaml_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load_settings(tmp_path / "missing.yaml", NO_ENV)
    broken = tmp_path / "broken.yaml"
    broken.write_text("network: [\n")
    with pytest.raises(ConfigError, match=r"not valid YAML at line \d+"):
        load_settings(broken, NO_ENV)


@pytest.mark.parametrize(
    "overrides, words",
    [
        (
            {"iam": {"permissions_boundary": "PlatformBoundary"}},
            "iam.permissions_boundary: 'PlatformBoundary' is not an IAM managed policy ARN",
        ),
        (
            {"iam": {"permissions_boundary": "arn:aws:iam::111111111111:role/Boundary"}},
            "iam.permissions_boundary: 'arn:aws:iam::111111111111:role/Boundary' is not an IAM managed",
        ),
        ({"iam": {"role_path": "trainstack"}}, "iam.role_path: 'trainstack' is not an IAM path that starts"),
        ({"iam": {"role_path": "/trainstack"}}, "iam.role_path: '/trainstack' is not an IAM path"),
        ({"bootstrap_qualifier": "MLPlatform"}, "bootstrap_qualifier: 'MLPlatform' is not 1 to 10 lowercase"),
        ({"bootstrap_qualifier": "ml_platform"}, "bootstrap_qualifier: 'ml_platform' is not 1 to 10"),
        ({"bootstrap_qualifier": "mlplatform1"}, "bootstrap_qualifier: 'mlplatform1' is not 1 to 10"),
        ({"compliance": "strict"}, "compliance: Input should be 'none' or 'control-tower'"),
        (
            {"compliance": "control-tower"},
            "compliance: control-tower needs access_logs_bucket, the name of an existing bucket",
        ),
    ],
)
def test_governance_errors_name_the_field(overrides, words):
    assert words in error_for(overrides)


def test_governance_settings_are_accepted():
    settings = parse_settings(
        {
            **default_config_data(),
            "compliance": "control-tower",
            "access_logs_bucket": "org-s3-access-logs",
            "iam": {"permissions_boundary": "arn:aws:iam::aws:policy/PowerUserAccess", "role_path": "/ml/x/"},
            "bootstrap_qualifier": "ml-1",
        },
        NO_ENV,
    )
    assert (settings.compliance, settings.iam.role_path, settings.bootstrap_qualifier) == (
        "control-tower",
        "/ml/x/",
        "ml-1",
    )


def test_synth_states_what_control_tower_costs_for_the_config(make_settings):
    """The line `make synth` prints: the default config's VPC with endpoints needs 4 keys and 1 endpoint."""
    from trainstack.governance_costs import cost_summary

    assert cost_summary(make_settings()).startswith("compliance: none; control-tower would add $11.30/month")
    governed = make_settings(
        {"compliance": "control-tower", "access_logs_bucket": "org-logs", "image": {"uri": IMAGE_URI}}
    )
    # An existing image: no copy function, so no key for its logs.
    assert cost_summary(governed).startswith("compliance: control-tower adds $10.30/month over none")


IMAGE_URI = "111111111111.dkr.ecr.us-east-1.amazonaws.com/trainstack:v1"


@pytest.mark.parametrize(
    ("dataset_prefix", "evaluation_prefix"),
    [("datasets/", "datasets/held-out/"), ("datasets/", "datasets/"), ("datasets/train/", "datasets/")],
)
def test_an_evaluation_set_overlapping_the_training_data_is_refused(dataset_prefix, evaluation_prefix):
    data = default_config_data()
    registered = next(index for index, profile in enumerate(data["profiles"]) if profile.get("registry"))
    data["profiles"][registered]["registry"]["evaluation_prefix"] = evaluation_prefix
    message = error_for({"profiles": data["profiles"], "dataset": {"prefix": dataset_prefix, "size_gib": 10}})
    assert (
        f"profiles.{registered}.registry.evaluation_prefix '{evaluation_prefix}' overlaps dataset.prefix "
        f"'{dataset_prefix}', which training reads whole"
    ) in message


@pytest.mark.parametrize("days", [0, 366])
def test_noncurrent_checkpoint_days_name_the_range(days):
    assert error_for({"checkpoints": {"noncurrent_version_days": days}}) == (
        "my.yaml: checkpoints.noncurrent_version_days: deleted or overwritten checkpoints stay restorable "
        f"1 to 365 days, not {days}."
    )


def test_noncurrent_checkpoint_days_default_to_a_week():
    settings = load_settings(DEFAULT_CONFIG, environ=NO_ENV)
    assert settings.checkpoints.noncurrent_version_days == 7
