"""Where a run's checkpoints live and where it resumes from, per checkpoint store (a profile's
`checkpoint_store`, trainstack/checkpoint_stores.py): the store-specific parts of a run's CreateTrainingJob
request (trainstack.job_request, whose module docstring has the table of what each sets).

- Checkpoint stores (a profile's `checkpoint_store`, trainstack/checkpoint_stores.py): `sagemaker-sync`
  sends CheckpointConfig (LocalPath /opt/ml/checkpoints, which train.py writes and SageMaker syncs with
  S3Uri). The others omit it, so nothing is downloaded before training, and name the run's location in
  train.py's `checkpoint_dir` hyperparameter: `s3-direct` the checkpoint bucket's `<runName>/`, `s3-express`
  the directory bucket's (DCP reads and writes both through s3torchconnector), `fsx` the run's directory
  under the `checkpoints` channel, the team's checkpoint directory on the file system mounted
  `FileSystemAccessMode: rw` (`checkpoint_dir_shared: true`: every node sees it).
- resumeFrom: with a store train.py reads in S3 itself (`s3-direct`, `s3-express`), a resumeFrom in a
  checkpoint bucket goes to train.py as the `resume_from` hyperparameter, and each rank reads only its own
  shards of it (DCP's S3StorageReader); every other resumeFrom (any store's model output, meant for a
  profile's `init_from`, or a checkpoint under `sagemaker-sync` or `fsx`) is the `resume` channel, which
  SageMaker downloads whole to every node before training.
"""

from __future__ import annotations

from typing import Any, Protocol

from trainstack.checkpoint_stores import S3_DIRECT_STORES
from trainstack.profiles import Profile


class StoreResources(Protocol):
    """What the stores read of trainstack.job_request.PipelineResources (no import back: job_request uses
    this module)."""

    @property
    def checkpoint_bucket(self) -> str: ...

    @property
    def express_checkpoint_bucket(self) -> str | None: ...

    @property
    def file_system_id(self) -> str | None: ...

    @property
    def checkpoint_file_system_path(self) -> str | None: ...

    @property
    def region(self) -> str | None: ...


CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"
# The fsx store's channel: SageMaker mounts a FileSystemDataSource channel at /opt/ml/input/data/<name>.
CHECKPOINT_CHANNEL = "checkpoints"
CHECKPOINT_CHANNEL_PATH = f"/opt/ml/input/data/{CHECKPOINT_CHANNEL}/"
RESUME_CHANNEL = "resume"
# Where s3torchconnector's client (training_scripts/checkpoint_storage.py) reads the Region from.
REGION_ENV = "AWS_REGION"
# train.py's --resume-from, when the store reads the resume source directly (resumes_directly).
RESUME_FROM_HYPERPARAMETER = "resume_from"


def checkpoint_prefix(profile: Profile, resources: StoreResources) -> str:
    """Where the profile's runs keep their checkpoints, each run under `<prefix><runName>/`."""
    if profile.checkpoint_store == "fsx":
        return CHECKPOINT_CHANNEL_PATH
    if profile.checkpoint_store == "s3-express":
        if resources.express_checkpoint_bucket is None:
            raise ValueError("checkpoint_store s3-express needs the storage stack's directory bucket")
        return f"s3://{resources.express_checkpoint_bucket}/"
    return f"s3://{resources.checkpoint_bucket}/"


def checkpoint_uri(profile: Profile, resources: StoreResources, run_name: str) -> str:
    """The run's checkpoint location, the same for every attempt: an S3 prefix, or with fsx the path in
    the job."""
    return f"{checkpoint_prefix(profile, resources)}{run_name}/"


def syncs_checkpoints(profile: Profile) -> bool:
    """Whether SageMaker syncs the profile's checkpoints (CheckpointConfig) rather than train.py reading
    and writing its store directly."""
    return profile.checkpoint_store == "sagemaker-sync"


def direct_resume_prefixes(profile: Profile, resources: StoreResources) -> list[str]:
    """The S3 prefixes a run of `profile` resumes from without a channel: the checkpoint buckets', when its
    store reads S3 itself; none otherwise."""
    if profile.checkpoint_store not in S3_DIRECT_STORES:
        return []
    buckets = (resources.checkpoint_bucket, resources.express_checkpoint_bucket)
    return [f"s3://{bucket}/" for bucket in buckets if bucket is not None]


def resumes_directly(profile: Profile, resources: StoreResources, uri: str) -> bool:
    """Whether train.py reads resumeFrom `uri` itself (hyperparameter resume_from), not a `resume` channel."""
    return any(uri.startswith(prefix) for prefix in direct_resume_prefixes(profile, resources))


def resume_channel(uri: str) -> dict[str, Any]:
    """Checkpoint to start from, mounted at /opt/ml/input/data/resume (SM_CHANNEL_RESUME)."""
    return {
        "ChannelName": RESUME_CHANNEL,
        "DataSource": {
            "S3DataSource": {
                "S3DataType": "S3Prefix",
                "S3Uri": uri,
                "S3DataDistributionType": "FullyReplicated",
            }
        },
        "InputMode": "File",
    }


def express_region(resources: StoreResources) -> str:
    if resources.region is None:
        raise ValueError("checkpoint_store s3-express needs the deployment's Region")
    return resources.region


def file_system_channel(name: str, file_system_id: str, path: str, mode: str) -> dict[str, Any]:
    return {
        "ChannelName": name,
        "DataSource": {
            "FileSystemDataSource": {
                "FileSystemId": file_system_id,
                "FileSystemType": "FSxLustre",
                "DirectoryPath": path,
                "FileSystemAccessMode": mode,
            }
        },
        "InputMode": "File",
    }


def checkpoint_channel(resources: StoreResources) -> dict[str, Any]:
    """The fsx store's checkpoint directory, mounted read-write (botocore: FileSystemAccessMode rw|ro)."""
    if resources.file_system_id is None or resources.checkpoint_file_system_path is None:
        raise ValueError("checkpoint_store fsx needs the deployment's file system (fsx.enabled: true)")
    return file_system_channel(
        CHECKPOINT_CHANNEL, resources.file_system_id, resources.checkpoint_file_system_path, "rw"
    )
