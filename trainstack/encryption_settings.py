"""`encryption:` in the config: a customer managed KMS key for what the runs write (docs/infrastructure.md,
"Encryption").

Off by default: checkpoints and artifacts then use S3-managed keys (SSE-S3), the training volumes and
CloudWatch Logs AWS's own keys, as stacks/storage/storage_stack.py explains. On, one key encrypts
- the checkpoint and artifact buckets (SSE-KMS with S3 Bucket Keys: one data key per bucket, few KMS calls),
- every training job's output and ML storage volume (CreateTrainingJob's `OutputDataConfig.KmsKeyId` and
  `ResourceConfig.VolumeKmsKeyId`, trainstack/job_request.py),
- the pipeline's CloudWatch log groups (the state machines' execution logs).

`customer_managed_key: true` has the storage stack create the key (rotated yearly, retained with the
buckets); `kms_key_arn` names an existing one, whose key policy its owner keeps (docs/iam.md lists what it
must allow). With `compliance: control-tower` the storage stack already has a customer managed key for
every bucket: `customer_managed_key: true` uses that same key, since two keys guarding the same objects
would double the key policies to keep right and the KMS requests to pay for, and protect nothing more.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import model_validator

from trainstack.base import StrictModel, matching

KMS_KEY_ARN = matching(
    r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]+$",
    "a KMS key ARN (arn:aws:kms:<region>:<account>:key/<key id>; not an alias)",
)


class EncryptionSettings(StrictModel):
    # The storage stack creates the key (with control-tower: the key its buckets already use).
    customer_managed_key: bool = False
    # An existing symmetric key instead, in the deployment's Region.
    kms_key_arn: Annotated[str | None, KMS_KEY_ARN] = None

    @model_validator(mode="after")
    def _one_key(self) -> EncryptionSettings:
        if self.customer_managed_key and self.kms_key_arn is not None:
            raise ValueError(
                "encryption: set customer_managed_key: true (the stack creates the key) or kms_key_arn (an "
                "existing key), not both"
            )
        return self

    @property
    def enabled(self) -> bool:
        return self.customer_managed_key or self.kms_key_arn is not None


def check_key_region(settings: Any) -> Any:
    """A key of the deployment's Region: S3 encrypts with a key of the bucket's Region (the S3 API reference
    says so where it spells it out, e.g. MetadataTableEncryptionConfiguration.KmsKeyArn; assumed for
    default bucket encryption), and KMS keys are Regional."""
    arn = settings.encryption.kms_key_arn
    if arn is not None and settings.region is not None and arn.split(":")[3] != settings.region:
        raise ValueError(
            f"encryption.kms_key_arn is a key in {arn.split(':')[3]}; use a key in the deployment's Region "
            f"{settings.region} (S3 and CloudWatch Logs encrypt only with a key of their own Region)"
        )
    return settings
