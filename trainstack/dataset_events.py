"""The dataset bucket's events to EventBridge, which retrain_on_new_data listens to (docs/trigger.md).

A bucket the storage stack creates has them on from creation (stacks/storage/storage_stack.py). An existing
bucket (`dataset.bucket_name`) it cannot change safely: S3's only call for it,
PutBucketNotificationConfiguration, replaces the whole configuration (S3 API reference), so the one safe
moment is before FSx links the bucket and adds its own notification, and the owner runs it, keeping the
bucket's other notifications (those the GET returns; EventBridgeConfiguration is an empty object)."""

from __future__ import annotations

from trainstack.config import DatasetSettings


def enable_events_command(bucket_name: str) -> str:
    """The one command that turns EventBridge on for `bucket_name` and keeps its other notifications."""
    # `jq -s`: the CLI prints nothing for a bucket without notifications, which slurps to [].
    return (
        f"aws s3api put-bucket-notification-configuration --bucket {bucket_name} "
        "--notification-configuration "
        f'"$(aws s3api get-bucket-notification-configuration --bucket {bucket_name} --output json '
        "| jq -cs '(.[0] // {}) + {EventBridgeConfiguration: {}}')\""
    )


def existing_bucket_warning(dataset: DatasetSettings, trigger_on: bool) -> str | None:
    """One sentence for an existing dataset bucket the trigger listens to, or None."""
    if not trigger_on or dataset.bucket_name is None:
        return None
    return (
        f"dataset.bucket_name '{dataset.bucket_name}' is an existing bucket whose events the stack cannot "
        "send to EventBridge without replacing its notification configuration, so retrain_on_new_data never "
        "starts until you run, once and before the first deploy links FSx to the bucket: "
        f"{enable_events_command(dataset.bucket_name)}"
    )
