"""`encryption:`: off by default, one key (created or given), in the deployment's Region; errors name the
field in one sentence."""

from __future__ import annotations

from tests.config.test_config import error_for
from tests.conftest import NO_ENV, default_config_data
from trainstack.config_loading import parse_settings

KEY = "arn:aws:kms:us-east-1:111111111111:key/0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"


def test_encryption_is_off_by_default():
    settings = parse_settings(default_config_data(), NO_ENV, source="default")
    assert not settings.encryption.enabled
    assert not any(profile.inter_container_traffic_encryption for profile in settings.profiles)


def test_a_created_key_and_a_given_one_together_are_refused():
    message = error_for({"encryption": {"customer_managed_key": True, "kms_key_arn": KEY}})
    assert "encryption: set customer_managed_key: true (the stack creates the key) or kms_key_arn" in message


def test_an_alias_is_not_a_key_arn():
    message = error_for({"encryption": {"kms_key_arn": "arn:aws:kms:us-east-1:111111111111:alias/runs"}})
    assert (
        "encryption.kms_key_arn: " in message
        and "is not a KMS key ARN" in message
        and "not an alias" in message
    )


def test_a_key_of_another_region_is_refused():
    message = error_for({"encryption": {"kms_key_arn": KEY.replace("us-east-1", "eu-west-1")}})
    assert (
        "encryption.kms_key_arn is a key in eu-west-1; use a key in the deployment's Region us-east-1"
        in message
    )
