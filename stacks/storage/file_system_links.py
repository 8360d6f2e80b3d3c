"""How the file system links to S3: the dataset, imported, and with the fsx checkpoint store the checkpoints,
exported. Which links a deployment gets (`link_layout`) keeps what every release before the fsx store built,
so that an upgrade replaces no file system and no association (docs/upgrading.md):

- Without the fsx store: the dataset at `/` by the association `DatasetAssociation` (its logical id since
  the first release), or on SCRATCH_2, unless retrain_on_new_data imports with a report, by the file
  system's own ImportPath (LustreConfiguration ImportPath and AutoImportPolicy NEW_CHANGED_DELETED).
- With the fsx store, or where release 0.5.0 built the links (`migrations.keep_split_fsx_links`: it linked
  every file system so): the dataset at `/dataset`, the checkpoints at `/checkpoints`. `/` allows one
  association only, so turning the store on replaces the dataset's association, which CloudFormation creates
  before it deletes the old one at `/`: `trainstack check-config --against` names it, and
  docs/infrastructure.md gives the steps before such a deploy.

- Dataset: `s3://<datasets>/<dataset.prefix>`, metadata imported on creation and new, changed and deleted
  objects imported automatically; nothing exported (training never writes the dataset).
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
- An import task's completion report must lie within an association's DataRepositoryPath, or within an
  ImportPath link's ExportPath, by default s3://bucket/FSxLustre<time> (CompletionReport.Path, botocore's fsx
  model): the retrain trigger's reports need an association.
- The rules associations obey together are trainstack/association_rules.py's: `links_problem` refuses links
  FSx would refuse at synth. UpdateDataRepositoryAssociation takes no FileSystemPath, so a new path replaces
  the association.
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
from trainstack.association_rules import Association, links_problem

ROOT_FILE_SYSTEM_PATH = "/"
DATASET_FILE_SYSTEM_PATH = "/dataset"  # with the fsx checkpoint store, beside its /checkpoints
CHECKPOINT_FILE_SYSTEM_PATH = "/checkpoints"
# The logical id of the dataset's association at / in every release: a stateful resource keeps its id.
ROOT_ASSOCIATION_LOGICAL_ID = "DatasetAssociation"
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

    @property
    def association(self) -> Association:
        return Association(self.construct_id, self.file_system_path, self.data_repository_path)


def link_layout(
    deployment_type: str, *, fsx_checkpoints: bool, reported_imports: bool, keep_split_links: bool = False
) -> str:
    """The file system's links: "import-path" (SCRATCH_2 by ImportPath), "root" (one association at /) or
    "two" (/dataset and /checkpoints); the module docstring says when."""
    if fsx_checkpoints or keep_split_links:
        return "two"
    return "import-path" if deployment_type == "SCRATCH_2" and not reported_imports else "root"


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
    """The associations of `file_system` ("root" or "two" of link_layout); `checkpoint_key`: the checkpoint
    bucket's key, or None (SSE-S3)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        file_system: fsx.CfnFileSystem,
        dataset_uri: str,
        checkpoint_bucket: s3.IBucket,
        checkpoint_key: kms.IKey | None,
        fsx_checkpoints: bool,
    ) -> None:
        super().__init__(scope, construct_id)
        self.dataset_path = DATASET_FILE_SYSTEM_PATH if fsx_checkpoints else ROOT_FILE_SYSTEM_PATH
        self.checkpoint_path = CHECKPOINT_FILE_SYSTEM_PATH if fsx_checkpoints else None
        dataset = Link("DatasetAssociation", self.dataset_path, dataset_uri, imports=True, exports=False)
        checkpoints = Link(
            "CheckpointAssociation",
            CHECKPOINT_FILE_SYSTEM_PATH,
            f"s3://{checkpoint_bucket.bucket_name}/{CHECKPOINT_EXPORT_PREFIX}",
            imports=False,
            exports=True,
        )
        self.links = (dataset, checkpoints) if fsx_checkpoints else (dataset,)
        if problem := links_problem([link.association for link in self.links]):
            raise ValueError(f"FSx would refuse the file system's links: {problem}")
        associations = [self._association(file_system, link) for link in self.links]
        if not fsx_checkpoints:
            associations[0].override_logical_id(ROOT_ASSOCIATION_LOGICAL_ID)
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

    def _association(self, file_system: fsx.CfnFileSystem, link: Link) -> fsx.CfnDataRepositoryAssociation:
        association = fsx.CfnDataRepositoryAssociation
        imports = association.AutoImportPolicyProperty(events=ALL_EVENTS) if link.imports else None
        exports = association.AutoExportPolicyProperty(events=ALL_EVENTS) if link.exports else None
        return fsx.CfnDataRepositoryAssociation(
            self,
            link.construct_id,
            file_system_id=file_system.ref,
            file_system_path=link.file_system_path,
            data_repository_path=link.data_repository_path,
            batch_import_meta_data_on_create=link.imports,
            s3=association.S3Property(auto_import_policy=imports, auto_export_policy=exports),
        )
