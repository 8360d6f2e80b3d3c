"""The file system's two links to S3 (data repository associations): the dataset, imported, at
DATASET_FILE_SYSTEM_PATH, and the fsx checkpoint store's checkpoints, exported, at
CHECKPOINT_FILE_SYSTEM_PATH.

- Dataset: `/dataset` <-> `s3://<datasets>/<dataset.prefix>`, metadata imported on creation and new, changed
  and deleted objects imported automatically; nothing exported (training never writes the dataset).
- Checkpoints: `/checkpoints` -> `s3://<checkpoints>/fsx-checkpoints/`, new, changed and deleted files
  exported automatically (AutoExportPolicy NEW, CHANGED, DELETED: FSx API reference, AutoExportPolicy), so
  each team's `/checkpoints/<team>/<runName>/step_<N>/` lands in `fsx-checkpoints/<team>/<runName>/...`, and
  keep_checkpoints pruning on the file system deletes in S3 too. Nothing imported: the file system is the
  primary copy, and S3 objects of the checkpoint bucket never appear on it.
- Automatic export "isn't available on FSx for Lustre 2.10 file systems or Scratch 1 file systems" (FSx for
  Lustre user guide, "Automatically export updates to your S3 bucket"): it works on the Lustre 2.15
  PERSISTENT_2 and SCRATCH_2 file systems built here. Export is asynchronous, "once your application
  finishes modifying the file" (AutoExportPolicy); rename is exported (only objects in S3 Glacier Flexible
  Retrieval miss chmod, chown and rename: "Exporting changes to the data repository").
- "Two data repository associations cannot have overlapping file system paths", and `/` allows one
  association only (CreateDataRepositoryAssociation FileSystemPath, botocore's fsx model); each association
  needs "a unique S3 bucket or prefix" (CreateDataRepositoryAssociation): `links_problem` refuses both at
  synth. UpdateDataRepositoryAssociation takes no FileSystemPath, so a new path replaces the association.
- A customer managed key of the checkpoint bucket must let the file system's service-linked role
  AWSServiceRoleForFSxS3Access_<file system id> encrypt and decrypt through S3 (FSx for Lustre user guide,
  "Working with server-side encrypted Amazon S3 buckets"): `allow_fsx_through_s3` adds that to a key the
  storage stack creates; an existing key's owner adds it (a synth warning says so).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.checkov_skips import skip_checkov

DATASET_FILE_SYSTEM_PATH = "/dataset"
CHECKPOINT_FILE_SYSTEM_PATH = "/checkpoints"
# Where the checkpoint association exports, in the checkpoint bucket: beside the runs' own `<runName>/`
# prefixes (sagemaker-sync, s3-direct), which start with the project name.
CHECKPOINT_EXPORT_PREFIX = "fsx-checkpoints/"
ALL_EVENTS = ["NEW", "CHANGED", "DELETED"]


@dataclass(frozen=True)
class Link:
    """One data repository association: a file system directory and the S3 location it maps 1-1."""

    construct_id: str
    file_system_path: str
    data_repository_path: str
    imports: bool
    exports: bool


def _nested(inner: str, outer: str) -> bool:
    inner, outer = inner.rstrip("/") + "/", outer.rstrip("/") + "/"
    return inner.startswith(outer)


def links_problem(links: Sequence[Link]) -> str | None:
    """Why FSx would refuse these associations on one file system, or None."""
    for index, link in enumerate(links):
        for other in links[index + 1 :]:
            if link.file_system_path == "/" or other.file_system_path == "/":
                return (
                    f"{link.construct_id} and {other.construct_id}: a file system path of / allows one data "
                    "repository association only"
                )
            if _nested(link.file_system_path, other.file_system_path) or _nested(
                other.file_system_path, link.file_system_path
            ):
                return (
                    f"{link.construct_id} ({link.file_system_path}) and {other.construct_id} "
                    f"({other.file_system_path}): data repository associations cannot have overlapping file "
                    "system paths"
                )
            if link.data_repository_path == other.data_repository_path:
                return (
                    f"{link.construct_id} and {other.construct_id} link the same S3 location "
                    f"{link.data_repository_path}; each association needs its own"
                )
    return None


def fsx_data_role_pattern(stack: cdk.Stack) -> str:
    """The ARN of any file system's S3 service-linked role in this account: it exists only once its file
    system does, so it is matched by name (FSx for Lustre user guide, "Working with server-side encrypted
    Amazon S3 buckets")."""
    return stack.format_arn(
        service="iam",
        region="",
        resource="role",
        resource_name="aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_*",
    )


def allow_fsx_through_s3(key: kms.Key, sid: str, actions: Sequence[str]) -> None:
    """Let the file systems' S3 service-linked roles use `key`, in this account and through S3 only."""
    stack = cdk.Stack.of(key)
    resource: cdk.CfnResource = key.node.default_child
    skipped = (resource.get_metadata("checkov") or {}).get("skip", [])
    if not any(skip["id"] == "CKV_AWS_33" for skip in skipped):
        skip_checkov(
            key,
            {
                "CKV_AWS_33": "The FSx statements name their principal by ARN pattern (the file system's "
                "service-linked role does not exist before the file system), limited to this account and to "
                "calls through S3."
            },
        )
    key.add_to_resource_policy(
        iam.PolicyStatement(
            sid=sid,
            principals=[iam.AnyPrincipal()],
            actions=list(actions),
            resources=["*"],
            conditions={
                "ArnLike": {"aws:PrincipalArn": fsx_data_role_pattern(stack)},
                "StringEquals": {
                    "kms:CallerAccount": stack.account,
                    "kms:ViaService": f"s3.{stack.region}.amazonaws.com",
                },
            },
        )
    )


# What FSx's guide grants its role on an SSE-KMS bucket it writes to (wildcards spelled out): export writes.
EXPORT_KEY_ACTIONS = (
    "kms:Encrypt",
    "kms:Decrypt",
    "kms:ReEncryptFrom",
    "kms:ReEncryptTo",
    "kms:GenerateDataKey",
    "kms:GenerateDataKeyWithoutPlaintext",
    "kms:DescribeKey",
)


class FileSystemLinks(Construct):
    """Both associations of `file_system`; `checkpoint_key`: the checkpoint bucket's key, or None (SSE-S3)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        file_system: fsx.CfnFileSystem,
        dataset_uri: str,
        checkpoint_bucket: s3.IBucket,
        checkpoint_key: kms.IKey | None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.links = (
            Link("DatasetAssociation", DATASET_FILE_SYSTEM_PATH, dataset_uri, imports=True, exports=False),
            Link(
                "CheckpointAssociation",
                CHECKPOINT_FILE_SYSTEM_PATH,
                f"s3://{checkpoint_bucket.bucket_name}/{CHECKPOINT_EXPORT_PREFIX}",
                imports=False,
                exports=True,
            ),
        )
        if problem := links_problem(self.links):
            raise ValueError(f"FSx would refuse the file system's links: {problem}")
        for link in self.links:
            self._association(file_system, link)
        if isinstance(checkpoint_key, kms.Key):
            allow_fsx_through_s3(checkpoint_key, "FsxExportsCheckpointsThroughS3", EXPORT_KEY_ACTIONS)
        elif checkpoint_key is not None:
            cdk.Annotations.of(self).add_warning_v2(
                "trainstack:fsx-export-key",
                "The checkpoint bucket's key is an existing one (encryption.kms_key_arn): its policy must "
                "let the file system's role AWSServiceRoleForFSxS3Access_<file system id> use it through S3 "
                f"({', '.join(EXPORT_KEY_ACTIONS)}), or FSx exports no fsx checkpoint "
                "(docs/infrastructure.md).",
            )

    def _association(self, file_system: fsx.CfnFileSystem, link: Link) -> None:
        association = fsx.CfnDataRepositoryAssociation
        imports = association.AutoImportPolicyProperty(events=ALL_EVENTS) if link.imports else None
        exports = association.AutoExportPolicyProperty(events=ALL_EVENTS) if link.exports else None
        fsx.CfnDataRepositoryAssociation(
            self,
            link.construct_id,
            file_system_id=file_system.ref,
            file_system_path=link.file_system_path,
            data_repository_path=link.data_repository_path,
            batch_import_meta_data_on_create=link.imports,
            s3=association.S3Property(auto_import_policy=imports, auto_export_policy=exports),
        )
