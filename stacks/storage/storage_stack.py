"""Storage: the dataset, checkpoint, artifact and access-log buckets; FSx for Lustre linked to the first two.

Encryption is SSE-S3 (AES-256, S3-managed keys) on every bucket created here, chosen over SSE-KMS because:
- FSx reads the dataset bucket through its service-linked role and SageMaker writes checkpoints and
  artifacts with the execution role: SSE-S3 needs no key policy for either, SSE-KMS needs both granted;
- checkpoints are large, frequent writes and FSx imports whole datasets: every object would otherwise
  cost KMS requests and count against the account's KMS request quota;
- S3 server access log delivery into an SSE-KMS bucket needs yet another key grant (the logging service).
No KMS key is created, so `encryption_key` is None; an imported dataset bucket keeps its own encryption,
and when that is SSE-KMS, `dataset.kms_key_arn` names the key (`dataset_key`) that training jobs may
decrypt with.

compliance: control-tower (Control Tower's S3 controls) turns this around: one customer managed key for
every bucket created here, with S3 Bucket Keys (a data key per bucket, not per object, keeps KMS requests
few); every bucket versioned, with Object Lock enabled (no default retention: nothing is locked unless a
request asks) and its events sent to EventBridge; and access logs go to `access_logs_bucket`, an existing
bucket, because S3 delivers no server access logs into a bucket with SSE-KMS or Object Lock.

`encryption:` (trainstack/encryption_settings.py) gives what runs write a customer managed key,
`run_data_key`: the checkpoint and artifact buckets are SSE-KMS with S3 Bucket Keys under it, and the
pipeline encrypts training jobs and its log groups with it. Created here (key policy: CloudWatch Logs for
the pipeline's log groups, stacks/run_data_key.py), or the bucket key itself with control-tower, or an
existing key by ARN.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.checkov_skips import skip_checkov
from stacks.network.network_stack import NetworkStack
from stacks.run_data_key import allow_pipeline_logs
from stacks.storage.express_checkpoints import ExpressCheckpoints
from stacks.storage.file_system_links import FileSystemLinks, allow_fsx_through_s3, link_layout
from stacks.validation import acknowledge
from trainstack.config import CheckpointSettings, DatasetSettings
from trainstack.dataset_events import existing_bucket_warning
from trainstack.encryption_settings import EncryptionSettings
from trainstack.express_buckets import ExpressBuckets
from trainstack.fsx_sizing import FsxPlan

ABORT_INCOMPLETE_UPLOADS_AFTER = cdk.Duration.days(7)
NONCURRENT_VERSIONS_KEPT_FOR = cdk.Duration.days(30)
ACCESS_LOGS_KEPT_FOR = cdk.Duration.days(365)
LUSTRE_VERSION = "2.15"


class StorageStack(cdk.Stack):
    """Buckets that outlive the stack (RETAIN) and the FSx file system sized by trainstack.fsx_sizing."""

    dataset_bucket: s3.IBucket
    dataset_prefix: str
    checkpoint_bucket: s3.IBucket
    express_checkpoints: ExpressCheckpoints
    artifact_bucket: s3.IBucket
    access_log_bucket: s3.IBucket
    encryption_key: kms.Key | None
    run_data_key: kms.IKey | None
    dataset_key: kms.IKey | None
    fsx_plan: FsxPlan | None
    file_system: fsx.CfnFileSystem | None
    file_system_id: str | None
    file_system_mount_name: str | None
    file_system_dataset_path: str | None
    file_system_checkpoint_path: str | None

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        project: str,
        governed: bool,
        dataset: DatasetSettings,
        checkpoints: CheckpointSettings,
        fsx_plan: FsxPlan | None,
        access_logs_bucket: str | None,
        network: NetworkStack,
        encryption: EncryptionSettings,
        express: ExpressBuckets | None = None,  # the s3-express store's directory buckets
        dataset_events: bool = False,  # retrain_on_new_data listens to the dataset bucket's events
        object_lock_in_place: bool = False,  # migrations.object_lock_in_place: see _bucket
        keep_split_fsx_links: bool = False,  # migrations.keep_split_fsx_links: see link_layout
        fsx_checkpoints: bool = False,  # a profile checkpoints to the file system (checkpoint_store fsx)
        **kwargs,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            description="trainstack storage: dataset, checkpoint and artifact buckets, FSx for Lustre",
            **kwargs,
        )
        self._governed = governed
        self._object_lock_in_place = object_lock_in_place
        self.fsx_plan = fsx_plan
        self.encryption_key = self._bucket_key(project, dataset) if governed else None
        self.run_data_key = self._run_data_key(project, encryption)
        run_bucket_key = self.run_data_key or self.encryption_key
        self.dataset_prefix = dataset.prefix
        self.access_log_bucket = (
            s3.Bucket.from_bucket_name(self, "AccessLogBucket", access_logs_bucket)
            if access_logs_bucket
            else self._access_log_bucket()
        )
        self.dataset_bucket = self._dataset_bucket(dataset, dataset_events)
        self.dataset_key = (
            kms.Key.from_key_arn(self, "DatasetKey", dataset.kms_key_arn) if dataset.kms_key_arn else None
        )
        # Versioned: SageMaker's checkpoint sync deletes in S3 what a job deletes locally, and the execution
        # role may delete there; a deleted or overwritten checkpoint stays restorable (trainstack
        # checkpoints restore) for noncurrent_version_days, a shorter time than artifacts because
        # checkpoints are large and every pruned one is kept that long.
        self.checkpoint_bucket = self._bucket(
            "CheckpointBucket",
            noncurrent_kept_for=cdk.Duration.days(checkpoints.noncurrent_version_days),
            expiration=cdk.Duration.days(checkpoints.retention_days),
            key=run_bucket_key,
        )
        self.express_checkpoints = ExpressCheckpoints(
            self,
            "ExpressCheckpoints",
            buckets=express or ExpressBuckets(None, {}),
            key=run_bucket_key,
            retention_days=checkpoints.retention_days,
        )
        # Versioned, for longer: model artifacts are the product of paid training, written once per job
        # and read later (resumeFrom, a profile's init_from); a bad overwrite or delete must be undoable.
        self.artifact_bucket = self._bucket(
            "ArtifactBucket", noncurrent_kept_for=NONCURRENT_VERSIONS_KEPT_FOR, key=run_bucket_key
        )

        self.file_system = None
        self.file_system_id = self.file_system_mount_name = None
        self.file_system_dataset_path = self.file_system_checkpoint_path = None
        if self.fsx_plan is not None:
            # The trigger imports new data with a report, which must lie within an association.
            layout = link_layout(
                self.fsx_plan.deployment_type,
                fsx_checkpoints=fsx_checkpoints,
                reported_imports=dataset_events,
                keep_split_links=keep_split_fsx_links,
            )
            self._file_system(self.fsx_plan, network, checkpoint_key=run_bucket_key, layout=layout)
        self._outputs()

    def _dataset_bucket(self, dataset: DatasetSettings, dataset_events: bool) -> s3.IBucket:
        if dataset.bucket_name is None:
            # Versioned: an overwritten or deleted training file can be restored for 30 days. Its events go to
            # EventBridge whatever the config (see _bucket): retrain_on_new_data listens there.
            return self._bucket(
                "DatasetBucket",
                noncurrent_kept_for=NONCURRENT_VERSIONS_KEPT_FOR,
                events=True,
                key=self.encryption_key,
            )
        bucket = s3.Bucket.from_bucket_name(self, "DatasetBucket", dataset.bucket_name)
        if warning := existing_bucket_warning(dataset, dataset_events):
            cdk.Annotations.of(bucket).add_warning_v2("trainstack:existing-dataset-bucket", warning)
        return bucket

    @property
    def dataset_uri(self) -> str:
        return f"s3://{self.dataset_bucket.bucket_name}/{self.dataset_prefix}"

    def _access_log_bucket(self) -> s3.Bucket:
        bucket = s3.Bucket(
            self,
            "AccessLogBucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            removal_policy=cdk.RemovalPolicy.RETAIN,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="ExpireAccessLogs",
                    expiration=ACCESS_LOGS_KEPT_FOR,
                    abort_incomplete_multipart_upload_after=ABORT_INCOMPLETE_UPLOADS_AFTER,
                )
            ],
        )
        skip_checkov(
            bucket,
            {
                "CKV_AWS_18": "This is the access-log destination of the other buckets; logging it into "
                "itself would loop.",
                "CKV_AWS_21": "Logs are written once and expire after 365 days; versions would only keep "
                "deleted logs longer.",
            },
        )
        return bucket

    def _bucket(
        self,
        construct_id: str,
        *,
        noncurrent_kept_for: cdk.Duration,
        expiration: cdk.Duration | None = None,
        events: bool = False,
        key: kms.IKey | None,
    ) -> s3.Bucket:
        """A versioned bucket (Object Lock too when governed, CT.S3.PR.1/9) whose deleted or overwritten
        objects stay restorable for `noncurrent_kept_for`; current objects expire after `expiration`."""
        rules = [
            s3.LifecycleRule(
                id="Housekeeping",
                abort_incomplete_multipart_upload_after=ABORT_INCOMPLETE_UPLOADS_AFTER,
                expiration=expiration,
                noncurrent_version_expiration=noncurrent_kept_for,
            ),
            # A delete marker alone once its noncurrent versions expired hides nothing and slows version
            # listings (`trainstack checkpoints restore` reads them). S3 forbids ExpiredObjectDeleteMarker in
            # a rule with expiration Days (LifecycleExpiration, S3 API reference), and such a rule removes
            # lone markers only once they reach its age (S3 user guide, lifecycle configuration elements).
            s3.LifecycleRule(id="LoneDeleteMarkers", expired_object_delete_marker=True),
        ]
        bucket = s3.Bucket(
            self,
            construct_id,
            encryption=s3.BucketEncryption.KMS if key else s3.BucketEncryption.S3_MANAGED,
            encryption_key=key,
            bucket_key_enabled=True if key else None,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            versioned=True,
            object_lock_enabled=True if self._governed and not self._object_lock_in_place else None,
            removal_policy=cdk.RemovalPolicy.RETAIN,
            server_access_logs_bucket=self.access_log_bucket,
            server_access_logs_prefix=f"{construct_id}/",
            lifecycle_rules=rules,
        )
        if self._governed and self._object_lock_in_place:
            # A bucket created without Object Lock gets it in place: the top-level ObjectLockEnabled, which
            # CT.S3.PR.9 reads, causes a replacement (a new, empty bucket: the resource specification the CDK
            # CLI ships), while ObjectLockConfiguration changes with no interruption (CloudFormation,
            # AWS::S3::Bucket ObjectLockConfiguration) and S3 enables Object Lock on an existing versioned
            # bucket (S3 User Guide, "Enable Object Lock on an existing S3 bucket"). No default retention.
            cfn_bucket: s3.CfnBucket = bucket.node.default_child
            cfn_bucket.object_lock_configuration = s3.CfnBucket.ObjectLockConfigurationProperty(
                object_lock_enabled="Enabled"
            )
        if self._governed or events:
            # Events to EventBridge (CT.S3.PR.4; retrain_on_new_data) as the bucket's own property, set
            # when the bucket is created and the same in every config after. S3 has no call that turns
            # EventBridge on alone: PutBucketNotificationConfiguration replaces the whole configuration, and
            # CloudFormation sends one whenever this property changes, dropping the notification FSx adds for
            # auto-import (its link then turns Misconfigured: FSx for Lustre guide, "Data repository
            # association lifecycle state"; aws-cdk issue 29653). The construct's event_bridge_enabled is no
            # better: CDK's Custom::S3BucketNotifications handler puts the construct's configuration alone on
            # a bucket of its own stack (handle_managed in aws-cdk-lib's notifications-resource-handler).
            cfn_bucket: s3.CfnBucket = bucket.node.default_child
            cfn_bucket.notification_configuration = s3.CfnBucket.NotificationConfigurationProperty(
                event_bridge_configuration=s3.CfnBucket.EventBridgeConfigurationProperty(
                    event_bridge_enabled=True
                )
            )
        if not isinstance(self.access_log_bucket, s3.Bucket):
            acknowledge(
                bucket,
                "Annotation::@aws-cdk/aws-s3:accessLogsPolicyNotAdded",
                "access_logs_bucket is the account's own bucket: its policy lets logging.s3.amazonaws.com "
                "write (README, Deploying into a governed account).",
            )
        return bucket

    def _run_data_key(self, project: str, encryption: EncryptionSettings) -> kms.IKey | None:
        if encryption.kms_key_arn is not None:
            return kms.Key.from_key_arn(self, "RunDataKey", encryption.kms_key_arn)
        if not encryption.customer_managed_key:
            return None
        if self.encryption_key is not None:
            # control-tower: the buckets' key already guards checkpoints and artifacts; a second key for the
            # same objects would add a key policy to keep right and protect nothing more. The pipeline's log
            # groups keep their own stack's key there (CT.CLOUDWATCH.PR.2/3, stacks/governed_account.py).
            return self.encryption_key
        key = self._retained_key(
            "RunDataKey", f"{project} runs: checkpoints, model artifacts, training volumes, pipeline logs"
        )
        allow_pipeline_logs(key, project)
        return key

    def _retained_key(self, construct_id: str, description: str) -> kms.Key:
        return kms.Key(
            self,
            construct_id,
            description=description,
            enable_key_rotation=True,
            removal_policy=cdk.RemovalPolicy.RETAIN,  # the buckets are retained: so is what decrypts them
        )

    def _bucket_key(self, project: str, dataset: DatasetSettings) -> kms.Key:
        key = self._retained_key("BucketKey", f"{project} buckets: datasets, checkpoints, model artifacts")
        if self.fsx_plan is not None and dataset.bucket_name is None:
            # FSx reads the dataset bucket as its service-linked role (stacks/storage/file_system_links.py).
            allow_fsx_through_s3(key, "FsxReadsTheDatasetThroughS3", ["kms:Decrypt", "kms:DescribeKey"])
        return key

    def _file_system(
        self, plan: FsxPlan, network: NetworkStack, *, checkpoint_key: kms.IKey | None, layout: str
    ) -> None:
        persistent = plan.deployment_type == "PERSISTENT_2"
        import_path = layout == "import-path"
        lustre = fsx.CfnFileSystem.LustreConfigurationProperty(
            deployment_type=plan.deployment_type,
            per_unit_storage_throughput=plan.per_unit_storage_throughput,
            data_compression_type="LZ4",
            # Metadata IOPS can only be chosen at creation; AUTOMATIC grows them with the capacity.
            metadata_configuration=fsx.CfnFileSystem.MetadataConfigurationProperty(mode="AUTOMATIC")
            if persistent
            else None,
            # SCRATCH_2 with neither the fsx store nor the trigger: linked as every release linked it.
            import_path=self.dataset_uri if import_path else None,
            auto_import_policy="NEW_CHANGED_DELETED" if import_path else None,
        )
        # L1 rather than fsx.LustreFileSystem: the L2 adds a 988-1023 self rule to the given security group
        # (the network stack owns the exact Lustre rules) and has no metadata configuration.
        file_system = fsx.CfnFileSystem(
            self,
            "FileSystem",
            file_system_type="LUSTRE",
            file_system_type_version=LUSTRE_VERSION,
            storage_type="SSD",
            storage_capacity=plan.storage_capacity_gib,
            subnet_ids=[network.training_subnets[0].subnet_id],
            security_group_ids=[network.fsx_security_group.security_group_id],
            lustre_configuration=lustre,
        )
        # RETAIN: a file system may hold files written to it directly, outside /checkpoints (the only path
        # exported to S3), and the newest checkpoints before their export: neither `cdk destroy` nor a
        # replacing update deletes it; removing it is a deliberate manual step.
        file_system.apply_removal_policy(cdk.RemovalPolicy.RETAIN)
        self.file_system = file_system
        self.file_system_id = file_system.ref
        self.file_system_mount_name = file_system.attr_lustre_mount_name
        # SageMaker's FileSystemDataSource.DirectoryPath values: /<mount name>[/dataset]/... and, with the fsx
        # store, /<mount name>/checkpoints/<team or all> (stacks/pipeline/pipeline_resources.py).
        mount = f"/{file_system.attr_lustre_mount_name}"
        self.file_system_dataset_path = mount
        if import_path:
            return
        links = FileSystemLinks(
            self,
            "Links",
            file_system=file_system,
            dataset_uri=self.dataset_uri,
            checkpoint_bucket=self.checkpoint_bucket,
            checkpoint_key=checkpoint_key,
            fsx_checkpoints=layout == "two",
        )
        self.file_system_dataset_path = f"{mount}{links.dataset_path.rstrip('/')}"
        if links.checkpoint_path is not None:
            self.file_system_checkpoint_path = f"{mount}{links.checkpoint_path}"

    def _outputs(self) -> None:
        buckets = {
            "DatasetBucketName": (
                self.dataset_bucket,
                "Dataset bucket (training data under the dataset prefix)",
            ),
            "CheckpointBucketName": (self.checkpoint_bucket, "Checkpoint bucket"),
            "ArtifactBucketName": (self.artifact_bucket, "Model artifact bucket"),
            "AccessLogBucketName": (self.access_log_bucket, "S3 server access logs of the other buckets"),
        }
        for output_id, (bucket, description) in buckets.items():
            cdk.CfnOutput(self, output_id, value=bucket.bucket_name, description=description)
        cdk.CfnOutput(
            self,
            "DatasetUri",
            value=self.dataset_uri,
            description="Where training data goes (FSx imports it)",
        )
        if self.file_system is not None:
            cdk.CfnOutput(
                self, "FileSystemId", value=self.file_system_id, description="FSx for Lustre file system id"
            )
            cdk.CfnOutput(
                self,
                "FileSystemMountName",
                value=self.file_system_mount_name,
                description="Lustre mount name",
            )
