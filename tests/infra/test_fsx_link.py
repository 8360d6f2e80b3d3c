"""No deploy breaks the FSx link: the dataset bucket's notification configuration is the same whatever the
trigger, the FSx deployment type and the governance mode, so no update ever rewrites it (and drops the
notification FSx adds for auto-import); an existing bucket gets a warning naming the one command to run."""

from __future__ import annotations

import itertools
import json

import pytest
import yaml
from aws_cdk import assertions

from tests.conftest import deep_merge, default_config_data
from tests.infra.conftest import settings_with, synthesize_infra
from tests.infra.templates import resources
from tests.infra.test_governed import GOVERNED
from tests.infra.test_storage import bucket
from trainstack.cli import main

TRIGGER = {"retrain_on_new_data": {"profile": "small-torchrun", "prefix": "datasets/corpus/"}}
MODES = {"none": {}, "control-tower": GOVERNED}
DEPLOYMENT_TYPES = ("PERSISTENT_2", "SCRATCH_2")
EXISTING = {"dataset": {"bucket_name": "existing-training-data"}}
COMMAND = (
    "aws s3api put-bucket-notification-configuration --bucket existing-training-data "
    '--notification-configuration "$(aws s3api get-bucket-notification-configuration --bucket '
    "existing-training-data --output json | jq -cs '(.[0] // {}) + {EventBridgeConfiguration: {}}')\""
)


def config(mode: str, deployment_type: str, trigger: bool, extra: dict | None = None) -> dict:
    overrides = deep_merge(MODES[mode], {"fsx": {"deployment_type": deployment_type}})
    return deep_merge(deep_merge(overrides, TRIGGER if trigger else {}), extra or {})


@pytest.fixture(scope="module")
def dataset_notifications(tmp_path_factory) -> dict[tuple[str, str, bool], tuple[str, list[str]]]:
    """(mode, deployment type, trigger) -> (the dataset bucket's NotificationConfiguration as CloudFormation
    receives it, the template's notification custom resources)."""
    found = {}
    for mode, deployment_type, trigger in itertools.product(MODES, DEPLOYMENT_TYPES, (False, True)):
        settings = settings_with(config(mode, deployment_type, trigger))
        infra = synthesize_infra(settings, tmp_path_factory.mktemp(f"{mode}-{deployment_type}-{trigger}"))
        template = infra.storage_template
        _, dataset = bucket(template, "DatasetBucket")
        notification = json.dumps(dataset["Properties"].get("NotificationConfiguration"))
        found[(mode, deployment_type, trigger)] = (
            notification,
            sorted(resources(template, "Custom::S3BucketNotifications")),
        )
    return found


def test_the_dataset_buckets_notification_configuration_never_changes_with_the_trigger(dataset_notifications):
    """Byte-identical with the trigger on and off, for PERSISTENT_2 and SCRATCH_2, in both governance modes:
    CloudFormation then never sends PutBucketNotificationConfiguration for it after the bucket's creation."""
    assert len(dataset_notifications) == 8
    for (mode, deployment_type, _), (notification, _) in dataset_notifications.items():
        with_trigger, _ = dataset_notifications[(mode, deployment_type, True)]
        assert notification == with_trigger, (mode, deployment_type)
    assert {notification for notification, _ in dataset_notifications.values()} == {
        json.dumps({"EventBridgeConfiguration": {"EventBridgeEnabled": True}})
    }
    # Nor does CDK's notification handler rewrite it (it puts its own configuration alone, aws-cdk 29653).
    assert all(handlers == [] for _, handlers in dataset_notifications.values())


def existing_bucket_warnings(infra) -> list:
    return assertions.Annotations.from_stack(infra.storage).find_warning(
        "*", assertions.Match.string_like_regexp("put-bucket-notification-configuration")
    )


def test_an_existing_bucket_with_the_trigger_warns_at_synth_with_the_one_command(tmp_path_factory):
    infra = synthesize_infra(
        settings_with(config("none", "SCRATCH_2", True, EXISTING)), tmp_path_factory.mktemp("existing")
    )
    (warning,) = existing_bucket_warnings(infra)
    message = warning.entry.data
    assert message.startswith(
        "dataset.bucket_name 'existing-training-data' is an existing bucket whose events the stack cannot "
        "send to EventBridge"
    )
    assert message.endswith(
        f"before the first deploy links FSx to the bucket: {COMMAND} [ack: "
        "trainstack:existing-dataset-bucket]"
    )
    # The stack itself leaves the bucket alone.
    assert resources(infra.storage_template, "Custom::S3BucketNotifications") == {}


def test_an_existing_bucket_without_the_trigger_needs_nothing(az_id_nat_scratch):
    assert az_id_nat_scratch.settings.dataset.bucket_name is not None
    assert existing_bucket_warnings(az_id_nat_scratch) == []


@pytest.mark.parametrize("trigger", [True, False])
def test_check_config_names_the_command_for_an_existing_bucket(trigger, tmp_path, capsys):
    path = tmp_path / "existing.yaml"
    path.write_text(
        yaml.safe_dump(deep_merge(default_config_data(), config("none", "SCRATCH_2", trigger, EXISTING)))
    )
    assert main(["check-config", str(path)]) == 0
    errors = capsys.readouterr().err
    expected = f"before the first deploy links FSx to the bucket: {COMMAND}\n"
    assert (
        "warning: dataset.bucket_name 'existing-training-data' is an existing bucket" in errors
    ) is trigger
    assert errors.endswith(expected) is trigger
