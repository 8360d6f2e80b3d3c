"""The dataset bucket sends its events to EventBridge, and nothing else, with or without retrain_on_new_data
(tests/infra/test_fsx_link.py): what that means for FSx's own S3 event notification is in docs/trigger.md."""

from __future__ import annotations

from tests.infra.templates import resources
from tests.infra.test_storage import associations


def _buckets(template) -> dict[str, dict]:
    return {name: body for name, body in resources(template, "AWS::S3::Bucket").items()}


def test_the_trigger_sends_the_dataset_buckets_events_to_eventbridge_and_nothing_else(
    imported_vpc_persistent_500,
):
    template = imported_vpc_persistent_500.storage_template
    buckets = _buckets(template)
    (dataset,) = [name for name in buckets if name.startswith("DatasetBucket")]
    # The whole NotificationConfiguration CloudFormation manages: no queue, topic or function destinations.
    assert buckets[dataset]["Properties"]["NotificationConfiguration"] == {
        "EventBridgeConfiguration": {"EventBridgeEnabled": True}
    }
    others = [
        name
        for name in buckets
        if name != dataset and "NotificationConfiguration" in buckets[name]["Properties"]
    ]
    assert others == []


def test_fsx_auto_import_stays_on_and_its_association_comes_after_the_bucket(imported_vpc_persistent_500):
    template = imported_vpc_persistent_500.storage_template
    association = associations(template)["/"]  # the trigger's import reports need an association
    assert association["S3"]["AutoImportPolicy"]["Events"] == ["NEW", "CHANGED", "DELETED"]
    (dataset,) = [name for name in _buckets(template) if name.startswith("DatasetBucket")]
    # The association names the bucket, so CloudFormation creates it (and FSx adds its notification) only
    # once the bucket, with its EventBridge setting, exists.
    assert f"'Ref': '{dataset}'" in str(association["DataRepositoryPath"])
