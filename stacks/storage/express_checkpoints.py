"""The s3-express checkpoint store: one S3 directory bucket (S3 Express One Zone) per namespace that uses it,
in the training AZ (trainstack/express_buckets.py says why one per team, and how they are named).

Each bucket (AWS::S3Express::DirectoryBucket, CloudFormation template reference):
- `LocationName` the training AZ's id and `DataRedundancy: SingleAvailabilityZone`: the zone the training
  subnet is pinned to, so every rank reads and writes within its AZ;
- default encryption as the deployment's checkpoint bucket: SSE-S3, or SSE-KMS with the customer managed
  key of the runs (`encryption:`) or of the buckets (control-tower). Directory buckets take a customer
  managed key by ARN, one per bucket for its lifetime, never the AWS managed aws/s3, and always use S3
  Bucket Keys for GET and PUT (S3 user guide, "Using server-side encryption with AWS KMS keys (SSE-KMS) in
  directory buckets");
- the checkpoint bucket's lifecycle: objects expire after `checkpoints.retention_days`, incomplete
  multipart uploads are aborted after 7 days (S3 user guide, "Creating and managing a lifecycle
  configuration for directory buckets"). Directory buckets have no versioning, Object Lock or server
  access logs (S3 user guide, "Differences for directory buckets"): a pruned checkpoint is gone;
- no bucket policy: the bucket and the team's SageMaker role are in one account, where the role's
  identity policy alone authorizes CreateSession (S3 user guide, "Authorizing Regional and Zonal endpoint
  API operations with IAM"), and nothing but that role is granted it;
- RETAIN, as the checkpoint bucket: checkpoints are paid training, and CloudFormation could not delete a
  non-empty bucket anyway (its DeleteBucket fails: template reference, above).
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3express as s3express
from constructs import Construct

from trainstack.express_buckets import ExpressBuckets

ABORT_INCOMPLETE_UPLOADS_DAYS = 7
SINGLE_AZ = "SingleAvailabilityZone"


class ExpressCheckpoints(Construct):
    """The directory buckets of `buckets`, by namespace; `key`: their SSE-KMS key (None: SSE-S3)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        buckets: ExpressBuckets,
        key: kms.IKey | None,
        retention_days: int,
    ) -> None:
        super().__init__(scope, construct_id)
        self._buckets = {
            space: self._bucket(space, name, buckets.zone_id, key, retention_days)
            for space, name in buckets.names.items()
        }

    def bucket_name(self, space: str) -> str | None:
        """The namespace's directory bucket name (a token), None when it uses no s3-express profile."""
        bucket = self._buckets.get(space)
        return bucket.ref if bucket is not None else None

    def bucket_arn(self, space: str) -> str | None:
        """`arn:aws:s3express:<region>:<account>:bucket/<name>`, CreateSession's resource."""
        bucket = self._buckets.get(space)
        return bucket.attr_arn if bucket is not None else None

    def _bucket(
        self, space: str, name: str, zone_id: str | None, key: kms.IKey | None, retention_days: int
    ) -> s3express.CfnDirectoryBucket:
        default = s3express.CfnDirectoryBucket.ServerSideEncryptionByDefaultProperty(
            sse_algorithm="aws:kms" if key else "AES256", kms_master_key_id=key.key_arn if key else None
        )
        bucket = s3express.CfnDirectoryBucket(
            self,
            f"{space}-checkpoints",
            bucket_name=name,
            location_name=zone_id,
            data_redundancy=SINGLE_AZ,
            bucket_encryption=s3express.CfnDirectoryBucket.BucketEncryptionProperty(
                server_side_encryption_configuration=[
                    s3express.CfnDirectoryBucket.ServerSideEncryptionRuleProperty(
                        server_side_encryption_by_default=default, bucket_key_enabled=True if key else None
                    )
                ]
            ),
            lifecycle_configuration=s3express.CfnDirectoryBucket.LifecycleConfigurationProperty(
                rules=[
                    s3express.CfnDirectoryBucket.RuleProperty(
                        id="Housekeeping",
                        status="Enabled",
                        expiration_in_days=retention_days,
                        abort_incomplete_multipart_upload=s3express.CfnDirectoryBucket.AbortIncompleteMultipartUploadProperty(
                            days_after_initiation=ABORT_INCOMPLETE_UPLOADS_DAYS
                        ),
                    )
                ]
            ),
        )
        bucket.apply_removal_policy(cdk.RemovalPolicy.RETAIN)
        cdk.CfnOutput(
            cdk.Stack.of(self),
            f"ExpressCheckpointBucket{_output_suffix(space)}",
            value=bucket.ref,
            description=f"s3-express checkpoints of {space} (directory bucket)",
        )
        return bucket


def _output_suffix(space: str) -> str:
    """A CloudFormation output id part from a namespace (letters and digits only)."""
    return "".join(part.capitalize() for part in space.split("-"))
