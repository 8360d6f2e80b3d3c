"""How long each checkpoint store (trainstack.checkpoint_stores) takes to write a checkpoint, to make it
durable and to restore it at a job's scale: bytes per node against the node's bandwidth, requests against
the store's request rate, bytes against the store's throughput (docs/plan.md, "Checkpoint stores").

A checkpoint is DCP's: one file per rank (`__<rank>_0.distcp`), `size` bytes in all, each node writing and
reading its share (`size / nodes`) when it reads directly. The time of a transfer is the longest of its
limits: the busiest node at NODE_BYTES_PER_SECOND, the requests at the store's rate, and the bytes at the
store's throughput.

- `sagemaker-sync`: the save is written to the node's disk (`--checkpoint-write-rate`); SageMaker then
  uploads it to S3, so it is durable only once that upload ends. A new job downloads the whole prefix,
  `keep_checkpoints` checkpoints, to every node before training starts (DESIGN.md, round 6), all of it
  through the prefix's request rate. An in-job restart reads the node's share from its own disk.
- `s3-direct`, `s3-express`: DCP writes and reads through s3torchconnector; each rank reads only its own
  shards, from the store, on a new job and an in-job restart alike. Durable when the save commits.
- `fsx`: the same reads and writes against the file system's throughput (trainstack/fsx_sizing.py).
  Durable when the save is on the file system, which every restart reads; its S3 export lags and changes
  no figure here (docs/training.md, "The fsx store").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainstack.checkpoint_stores import CHECKPOINT_STORES
from trainstack.fsx_sizing import BYTES_PER_GIB, BYTES_PER_MB, TIERS, size_fsx
from trainstack.planning.checkpoints import GB

MIB = 2**20
# One node's bandwidth to a network store, assumed until measured (the figure trainstack planned restarts
# with before; s3torchconnector's own default throughput target is 10 Gb/s per client: S3ClientConfig).
NODE_BYTES_PER_SECOND = 1 * GB
# The size of one request: s3torchconnector's S3ClientConfig.part_size default (8 MiB). SageMaker's
# checkpoint sync is assumed to use the same (the AWS CLI's multipart_chunksize default is 8 MiB).
REQUEST_BYTES = 8 * MIB
# S3 general purpose buckets: "at least 3,500 PUT/COPY/POST/DELETE or 5,500 GET/HEAD requests per second
# per partitioned Amazon S3 prefix"; scaling to more partitions "is gradual, not instantaneous" (S3 user
# guide, "Best practices design patterns: optimizing Amazon S3 performance"). A restart's burst arrives at
# once, so the checkpoint prefix is taken as one partition (assumed; tests/plan try more).
S3_GETS_PER_SECOND_PER_PREFIX = 5_500
S3_PUTS_PER_SECOND_PER_PREFIX = 3_500
ASSUMED_S3_PARTITIONS = 1
# S3 Express One Zone: "By default, each directory bucket supports up to 200,000 reads and up to 100,000
# writes per second" (up to 2,000,000 and 200,000 through AWS Support): S3 user guide, "Optimizing S3
# Express One Zone performance".
S3_EXPRESS_GETS_PER_SECOND = 200_000
S3_EXPRESS_PUTS_PER_SECOND = 100_000
# FSx: assumed sized to hold keep_checkpoints checkpoints on PERSISTENT_2 at its fastest per-TiB throughput
# (its baseline from trainstack/fsx_sizing.py); a larger file system reads faster.
FSX_CHECKPOINT_TIER = next(tier for tier in TIERS if tier.per_unit_storage_throughput == 1000)


@dataclass(frozen=True)
class StoreTimes:
    """Seconds one checkpoint takes in one store at one scale."""

    store: str
    write: float  # one save's whole write (an async save's background part)
    durable_after: float  # after the save's blocking part, until a new job could restore it
    restore_new_job: float  # a new job's restore before training
    restore_in_job: float  # an in-job restart's restore (the same instances)


@dataclass(frozen=True)
class Checkpointing:
    """What the stores' times depend on: the checkpoint and the job's shape."""

    size: int  # bytes
    nodes: int
    ranks: int
    keep: int  # checkpoints kept (sagemaker-sync downloads them all)
    disk_bytes_per_second: float  # the node's own disk (--checkpoint-write-rate)
    asynchronous: bool

    @property
    def s3_partitions(self) -> int:
        return ASSUMED_S3_PARTITIONS

    @property
    def per_node(self) -> float:
        return self.size / self.nodes

    def requests(self, size: float, files: int) -> int:
        """Requests to move `size` bytes in `files` files: at least one per file, one per part."""
        return max(files, math.ceil(size / REQUEST_BYTES))


def store_times(store: str, job: Checkpointing) -> StoreTimes:
    if store not in CHECKPOINT_STORES:
        raise ValueError(f"checkpoint store must be one of {', '.join(CHECKPOINT_STORES)}, got {store!r}")
    if store == "sagemaker-sync":
        return _sagemaker_sync(job)
    if store == "fsx":
        throughput = fsx_bytes_per_second(job.size * job.keep)
        write = max(job.per_node / NODE_BYTES_PER_SECOND, job.size / throughput)
        return StoreTimes(store, write, write if job.asynchronous else 0.0, write, write)
    gets, puts = _request_rates(store, job)
    write = _transfer(job.per_node, job.requests(job.size, job.ranks), puts)
    read = _transfer(job.per_node, job.requests(job.size, job.ranks), gets)
    return StoreTimes(store, write, write if job.asynchronous else 0.0, read, read)


def fsx_bytes_per_second(stored_bytes: float) -> float:
    """The baseline throughput of the file system that holds `stored_bytes` (FSX_CHECKPOINT_TIER)."""
    capacity = size_fsx(stored_bytes / BYTES_PER_GIB, deployment_type="PERSISTENT_2").storage_capacity_gib
    return FSX_CHECKPOINT_TIER.baseline_mbps(capacity) * BYTES_PER_MB


def _sagemaker_sync(job: Checkpointing) -> StoreTimes:
    prefix_gets = S3_GETS_PER_SECOND_PER_PREFIX * job.s3_partitions
    prefix_puts = S3_PUTS_PER_SECOND_PER_PREFIX * job.s3_partitions
    write = job.per_node / job.disk_bytes_per_second
    upload = _transfer(job.per_node, job.requests(job.size, job.ranks), prefix_puts)
    every_node = job.keep * job.size  # the whole prefix, to each node
    files = job.keep * job.ranks
    download = _transfer(every_node, job.nodes * job.requests(every_node, files), prefix_gets)
    return StoreTimes(
        "sagemaker-sync",
        write=write,
        durable_after=(write if job.asynchronous else 0.0) + upload,
        restore_new_job=download,
        restore_in_job=job.per_node / job.disk_bytes_per_second,
    )


def _request_rates(store: str, job: Checkpointing) -> tuple[float, float]:
    if store == "s3-express":
        return S3_EXPRESS_GETS_PER_SECOND, S3_EXPRESS_PUTS_PER_SECOND
    return (
        S3_GETS_PER_SECOND_PER_PREFIX * job.s3_partitions,
        S3_PUTS_PER_SECOND_PER_PREFIX * job.s3_partitions,
    )


def _transfer(bytes_per_node: float, requests: int, requests_per_second: float) -> float:
    return max(bytes_per_node / NODE_BYTES_PER_SECOND, requests / requests_per_second)
