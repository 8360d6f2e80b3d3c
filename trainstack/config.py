"""The one validated config model: Settings and its parts, what stacks and commands read.

Each check raises a ValueError whose message names the field and what is allowed; reading a file into
Settings, and its one-sentence ConfigError, is trainstack/config_loading.py.
"""

from __future__ import annotations

import functools
import importlib.resources
import ipaddress
import json
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from trainstack.base import StrictModel, matching
from trainstack.cost_cap import check_cost_caps
from trainstack.encryption_settings import KMS_KEY_ARN, EncryptionSettings, check_key_region
from trainstack.express_buckets import check_express_buckets
from trainstack.fault_model import FaultModel, inherit_fault_model
from trainstack.fsx_sizing import FsxPlan, FsxSettings, plan_for
from trainstack.governance import BOOTSTRAP_QUALIFIER, CONTROL_TOWER, Compliance, IamSettings
from trainstack.migration_settings import MigrationSettings, check_migrations
from trainstack.planning.auto_interval import check_auto_intervals
from trainstack.planning.setups import fit_problems
from trainstack.profiles import Profile
from trainstack.queue_settings import QueueSettings
from trainstack.registry_settings import check_evaluations, check_held_out_sets
from trainstack.team_tracking import check_tracking_servers
from trainstack.teams import RunLimits, Team, check_teams
from trainstack.trigger_settings import RetrainOnNewData

# AZ ids start with a per-region code (use1-az4 is in us-east-1); AZ id -> name differs per account,
# so the region check is all that can be done offline.
_AZ_ID_REGION_CODES = {
    "us-east-1": "use1",
    "us-east-2": "use2",
    "us-west-1": "usw1",
    "us-west-2": "usw2",
    "ca-central-1": "cac1",
    "eu-west-1": "euw1",
    "eu-west-2": "euw2",
    "eu-west-3": "euw3",
    "eu-central-1": "euc1",
    "eu-central-2": "euc2",
    "eu-north-1": "eun1",
    "eu-south-1": "eus1",
    "eu-south-2": "eus2",
    "ap-northeast-1": "apne1",
    "ap-northeast-2": "apne2",
    "ap-northeast-3": "apne3",
    "ap-southeast-1": "apse1",
    "ap-southeast-2": "apse2",
    "ap-southeast-3": "apse3",
    "ap-south-1": "aps1",
    "ap-south-2": "aps2",
    "ap-east-1": "ape1",
    "sa-east-1": "sae1",
    "me-south-1": "mes1",
    "me-central-1": "mec1",
    "af-south-1": "afs1",
    "il-central-1": "ilc1",
}


@functools.cache
def known_regions() -> frozenset[str]:
    """Every Region of every partition in botocore's endpoint data (aws, aws-cn, aws-us-gov, ...).

    Read from the package's data file: botocore.loaders would import botocore's HTTP stack, which
    `make synth` does not otherwise need (half a second of every synth)."""
    endpoints = json.loads(importlib.resources.files("botocore").joinpath("data/endpoints.json").read_text())
    return frozenset(region for partition in endpoints["partitions"] for region in partition["regions"])


def botocore_version() -> str:
    import botocore  # the package alone: no HTTP stack

    return botocore.__version__


class ExistingNetwork(StrictModel):
    """An existing VPC and subnet(s) in the training AZ, used instead of creating a VPC."""

    vpc_id: Annotated[str, matching(r"^vpc-[0-9a-f]{8,17}$", "a VPC id like vpc-0a1b2c3d4e5f60718")]
    vpc_cidr: str
    subnet_ids: Annotated[
        list[
            Annotated[str, matching(r"^subnet-[0-9a-f]{8,17}$", "a subnet id like subnet-0a1b2c3d4e5f60718")]
        ],
        Field(min_length=1),
    ]
    route_table_ids: Annotated[
        list[
            Annotated[str, matching(r"^rtb-[0-9a-f]{8,17}$", "a route table id like rtb-0a1b2c3d4e5f60718")]
        ],
        Field(min_length=1),
    ]


class NetworkSettings(StrictModel):
    vpc_cidr: str = "10.20.0.0/16"
    # "endpoints": private subnets reach AWS APIs through VPC interface endpoints (no internet);
    # "nat": a public subnet with one NAT gateway in the training AZ.
    egress: Literal["endpoints", "nat"] = "endpoints"
    existing: ExistingNetwork | None = None

    @field_validator("vpc_cidr")
    @classmethod
    def _cidr(cls, value: str) -> str:
        try:
            network = ipaddress.IPv4Network(value, strict=True)
        except ValueError as error:
            raise ValueError(f"'{value}' is not an IPv4 CIDR block such as 10.20.0.0/16") from error
        if not 16 <= network.prefixlen <= 24:
            raise ValueError(f"'{value}' must have a prefix length between /16 and /24")
        return value


class DatasetSettings(StrictModel):
    # None creates a bucket; a name uses an existing bucket (not managed by the stack).
    bucket_name: Annotated[
        str | None,
        matching(
            r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$",
            "an S3 bucket name: 3 to 63 lowercase letters, digits, dots or hyphens",
        ),
    ] = None
    prefix: Annotated[
        str,
        matching(
            r"^([A-Za-z0-9!_.*'()-]+/)*$",
            "an S3 key prefix ending in / (like datasets/ or corpus/v2/), or empty for the whole bucket",
        ),
    ] = "datasets/"
    size_gib: Annotated[float, Field(gt=0, le=1_000_000)] = 1000
    # The KMS key of an existing SSE-KMS bucket: training jobs get kms:Decrypt on it.
    kms_key_arn: Annotated[str | None, KMS_KEY_ARN] = None

    @model_validator(mode="after")
    def _key_of_existing_bucket(self) -> DatasetSettings:
        if self.kms_key_arn is not None and self.bucket_name is None:
            raise ValueError(
                "kms_key_arn is the key of an existing SSE-KMS bucket: set bucket_name too (the bucket "
                "the stack creates is encrypted with S3-managed keys)"
            )
        return self


NONCURRENT_VERSION_DAYS = range(1, 366)


class CheckpointSettings(StrictModel):
    # Days a checkpoint stays current (its newest version) before S3 expires it.
    retention_days: Annotated[int, Field(ge=1, le=3650)] = 30
    # Days a deleted or overwritten checkpoint file stays restorable (`trainstack checkpoints restore`)
    # before S3 removes that noncurrent version; each day keeps that day's pruned checkpoints, paid for.
    noncurrent_version_days: int = 7

    @field_validator("noncurrent_version_days")
    @classmethod
    def _restorable_for_a_while(cls, days: int) -> int:
        if days not in NONCURRENT_VERSION_DAYS:
            raise ValueError(
                f"deleted or overwritten checkpoints stay restorable {NONCURRENT_VERSION_DAYS.start} to "
                f"{NONCURRENT_VERSION_DAYS.stop - 1} days, not {days}"
            )
        return days


class ImageSettings(StrictModel):
    # None builds container/ into ECR at deploy time; a URI uses an image that already exists.
    uri: Annotated[
        str | None,
        matching(
            r"^\d{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(\.cn)?/[a-z0-9._/-]+(:[\w.-]+|@sha256:[0-9a-f]{64})$",
            "an ECR image URI with a tag or digest, like "
            "111111111111.dkr.ecr.us-east-1.amazonaws.com/trainstack:v1",
        ),
    ] = None
    # At least 2: runs in flight keep running the image of the release they started on (docs/pipeline.md).
    keep_images: Annotated[int, Field(ge=2, le=1000)] = 10
    # Digest of AWS's SMP base image in the deploy region (AWS publishes none; see docs/container.md).
    base_digest: Annotated[
        str | None, matching(r"^sha256:[0-9a-f]{64}$", "an image digest: sha256: and 64 hex digits")
    ] = None


@dataclass(frozen=True)
class TrainingZone:
    """The one availability zone training runs in, as the config names it: by name or by id (exactly one)."""

    name: str | None
    zone_id: str | None

    @property
    def label(self) -> str:
        return self.name or self.zone_id  # type: ignore[return-value]


class Settings(StrictModel):
    project: Annotated[
        str,
        matching(r"^[a-z][a-z0-9-]{1,20}$", "2 to 21 lowercase letters, digits or - starting with a letter"),
    ] = "trainstack"
    account: Annotated[str | None, matching(r"^\d{12}$", "an AWS account id of 12 digits")] = None
    region: str | None = None  # checked against botocore's partition data in _placement
    availability_zone: Annotated[
        str | None, matching(r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$", "an AZ name like us-east-1a (region + letter)")
    ] = None
    availability_zone_id: Annotated[str | None, matching(r"^[a-z]+\d-az\d+$", "an AZ id like use1-az4")] = (
        None
    )
    network: NetworkSettings = NetworkSettings()
    dataset: DatasetSettings = DatasetSettings()
    fsx: FsxSettings = FsxSettings(throughput_mbps=1000)
    checkpoints: CheckpointSettings = CheckpointSettings()
    image: ImageSettings = ImageSettings()
    notification_emails: list[
        Annotated[str, matching(r"^[^@\s]+@[^@\s]+\.[^@\s]+$", "an email address like ml-team@example.com")]
    ] = []
    tags: dict[
        Annotated[str, Field(min_length=1, max_length=128)], Annotated[str, Field(max_length=256)]
    ] = {}
    profiles: list[Profile] = []
    queue: QueueSettings = QueueSettings()
    fault_model: FaultModel = FaultModel()  # failure rate for goodput and checkpoint_interval: auto
    retrain_on_new_data: RetrainOnNewData | None = None  # off unless set (trainstack/trigger_settings.py)
    # Teams sharing this deployment, each with a pipeline of its own (trainstack/teams.py, docs/teams.md).
    teams: list[Team] = []
    # Teams may log to one MLflow tracking server, reading each other's runs (trainstack/team_tracking.py).
    shared_tracking_server: bool = False
    # Deploying into a governed account (trainstack/governance.py; README of the same name).
    compliance: Compliance = "none"
    iam: IamSettings = IamSettings()
    encryption: EncryptionSettings = EncryptionSettings()  # off unless set: trainstack/encryption_settings.py
    bootstrap_qualifier: Annotated[str | None, BOOTSTRAP_QUALIFIER] = None
    # An existing bucket (same account and Region) for the S3 server access logs instead of one the storage
    # stack creates. control-tower needs it: no access-log destination can meet its S3 controls (S3 delivers
    # no server access logs into a bucket with SSE-KMS default encryption or Object Lock).
    access_logs_bucket: Annotated[
        str | None,
        matching(
            r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$",
            "an S3 bucket name: 3 to 63 lowercase letters, digits, dots or hyphens",
        ),
    ] = None
    # What this deployment keeps from its earlier configs (trainstack/migration_settings.py).
    migrations: MigrationSettings = MigrationSettings()

    _fault_models = model_validator(mode="before")(classmethod(inherit_fault_model))
    _auto_intervals = model_validator(mode="after")(check_auto_intervals)
    _held_out_sets = model_validator(mode="after")(check_held_out_sets)
    _evaluations = model_validator(mode="after")(check_evaluations)
    _teams = model_validator(mode="after")(check_teams)
    _tracking_servers = model_validator(mode="after")(check_tracking_servers)
    _key_region = model_validator(mode="after")(check_key_region)
    _migrations = model_validator(mode="after")(check_migrations)

    @model_validator(mode="after")
    def _placement(self) -> Settings:
        if self.account is None or self.region is None:
            raise ValueError(
                "account and region must be set in the file or by CDK_DEFAULT_ACCOUNT/CDK_DEFAULT_REGION"
            )
        if self.region not in known_regions():
            raise ValueError(
                f"region: '{self.region}' is not an AWS Region known to botocore {botocore_version()}; "
                f"use one of {', '.join(sorted(known_regions()))}"
            )
        if (self.availability_zone is None) == (self.availability_zone_id is None):
            raise ValueError(
                "set exactly one of availability_zone (an AZ name like us-east-1a) "
                "or availability_zone_id (an AZ id like use1-az4)"
            )
        if not self.profiles:
            raise ValueError("profiles: give at least one training profile (see config/default.yaml)")
        if self.availability_zone is not None and self.availability_zone[:-1] != self.region:
            raise ValueError(
                f"availability_zone '{self.availability_zone}' is not in region '{self.region}'; "
                f"use an AZ of that region such as {self.region}a"
            )
        code = _AZ_ID_REGION_CODES.get(self.region)
        if (
            self.availability_zone_id is not None
            and code
            and not self.availability_zone_id.startswith(f"{code}-az")
        ):
            raise ValueError(
                f"availability_zone_id '{self.availability_zone_id}' is not in region '{self.region}'; "
                f"ids there look like {code}-az1"
            )
        names = [profile.name for profile in self.profiles]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"profile names must be unique; repeated: {', '.join(duplicates)}")
        return self

    @model_validator(mode="after")
    def _models_fit(self) -> Settings:
        # A fallback type that cannot hold the model fails here, not after hours of waiting for capacity.
        for index, profile in enumerate(self.profiles):
            for problem in fit_problems(profile):
                raise ValueError(f"profiles.{index}: {problem}")
        return self

    # After the region and the models are known good: caps are priced in the region (trainstack.cost_cap).
    _cost_caps = model_validator(mode="after")(check_cost_caps)

    @model_validator(mode="after")
    def _queue_fits(self) -> Settings:
        for index, profile in enumerate(self.profiles):
            if profile.priority is not None and not (
                self.queue.enabled and (self.queue.shares or self.teams)
            ):
                raise ValueError(
                    f"profiles.{index}.priority orders jobs only in a fair-share queue; "
                    "set queue.enabled and queue.shares (or teams), or remove priority"
                )
            if not self.queue.enabled:
                continue
            for preference in profile.instance_preferences:
                if preference.instance_count > self.queue.max_instances:
                    raise ValueError(
                        f"profile {profile.name} asks for {preference.instance_count} x "
                        f"{preference.instance_type}, more than queue.max_instances "
                        f"({self.queue.max_instances}); such a job would wait forever"
                    )
        return self

    @model_validator(mode="after")
    def _trigger_fits(self) -> Settings:
        if self.retrain_on_new_data and (
            problem := self.retrain_on_new_data.problem([p.name for p in self.profiles], self.dataset.prefix)
        ):
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _governed(self) -> Settings:
        if self.compliance == CONTROL_TOWER and self.access_logs_bucket is None:
            raise ValueError(
                "compliance: control-tower needs access_logs_bucket, the name of an existing bucket in the "
                "same account and Region for S3 server access logs (Control Tower's S3 controls forbid "
                "creating one)"
            )
        return self

    @model_validator(mode="after")
    def _checkpoint_stores_fit(self) -> Settings:
        for index, profile in enumerate(self.profiles):
            store = profile.checkpoint_store
            if store == "fsx" and not self.fsx.enabled:
                raise ValueError(
                    f"profiles.{index}.checkpoint_store: fsx needs the deployment's file system "
                    "(fsx.enabled: true); enable it or choose sagemaker-sync, s3-direct or s3-express"
                )
        return self

    # After _placement: the bucket names need the account and the zone.
    _express_buckets = model_validator(mode="after")(check_express_buckets)

    @model_validator(mode="after")
    def _fsx_fits(self) -> Settings:
        # An FSx need no file system meets fails here: FsxSizingError is a ValueError naming the field.
        _ = self.fsx_plan
        return self

    @property
    def fsx_plan(self) -> FsxPlan | None:
        """FSx for Lustre sized for dataset.size_gib and the fsx need; None when fsx.enabled is false."""
        # Recomputed on each use (microseconds): a cached value would go stale in model_copy(update=...).
        return plan_for(self.dataset.size_gib, self.fsx)

    @property
    def limits(self) -> RunLimits:
        """The product's own limits on one run: a config without teams has no others (with teams, each team's
        pipeline has its caps: trainstack.pipeline_runs)."""
        return RunLimits()

    @property
    def training_zone(self) -> TrainingZone:
        return TrainingZone(self.availability_zone, self.availability_zone_id)

    @property
    def az_label(self) -> str:
        """The configured AZ, by name or by id, for messages and descriptions."""
        return self.training_zone.label

    def profile(self, name: str) -> Profile:
        for profile in self.profiles:
            if profile.name == name:
                return profile
        raise KeyError(name)
