"""Restoring one sharded DCP checkpoint three ways, side by side in one run (issue 41).

    python benchmarks/checkpoint_restore.py [--ranks 4] [--size-mb 64]

`--ranks` gloo processes on this machine hold one model state sharded across them (DTensor, Shard(0),
as FSDP shards it) and save it once with DCP to a local S3 endpoint (moto's server, localaws/s3_endpoint.py)
through s3torchconnector's S3StorageWriter, as the `s3-direct` store does. Each rank stands for one node.
Then every rank restores it:

- `full download`: what SageMaker's checkpoint sync does (CheckpointConfig): every node first downloads
  the whole checkpoint prefix, then reads its shards from the local copy;
- `direct read`: DCP's S3StorageReader (s3torchconnector) reads only the rank's own shards from S3
  (`s3-direct`, `s3-express`);
- `shared dir`: DCP's FileSystemReader reads the rank's shards from one local directory standing in for
  the mounted FSx file system (`fsx`).

Printed per way: bytes moved per node (the download's bytes; the bytes each rank's reader returned, the
`.metadata` included), the slowest rank's seconds, and each way's bytes over the full download's: direct
and shared reads move about 1 / ranks of it. Every restored shard is checked against the saved one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from s3torchconnector import S3ClientConfig
from s3torchconnector.dcp import S3StorageReader, S3StorageWriter
from torch.distributed._tensor import Shard, distribute_tensor
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.device_mesh import init_device_mesh

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training_scripts"))
from checkpoint_storage import counted  # noqa: E402 (train.py's own byte count of a restore)

from localaws.s3_endpoint import REGION, local_s3, s3_client  # noqa: E402

MB = 10**6
BUCKET = "checkpoint-restore"
PREFIX = "run/step_000000100"
WAYS = ("full download", "direct read", "shared dir")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=4, help="processes, each standing for one node")
    parser.add_argument("--size-mb", type=int, default=64, help="the checkpoint's size, in MB")
    return parser.parse_args(argv)


def model_state(size_bytes: int, mesh) -> dict[str, torch.Tensor]:
    """fp32 matrices of about `size_bytes` in all, each sharded by rows across the mesh."""
    rows, columns = 1024, 256
    count = max(1, size_bytes // (rows * columns * 4))
    generator = torch.Generator().manual_seed(0)
    return {
        f"layer_{i}.weight": distribute_tensor(
            torch.randn(rows, columns, generator=generator), mesh, [Shard(0)]
        )
        for i in range(count)
    }


def restore(state: dict, reader) -> tuple[int, float]:
    """Load `state` (zeroed) with `reader`: the bytes read and the seconds, checked against the saved."""
    expected = {name: tensor.to_local().clone() for name, tensor in state.items()}
    for tensor in state.values():
        tensor.to_local().zero_()
    reader, counter = counted(reader)
    dist.barrier()
    start = time.perf_counter()
    dcp.load(state, storage_reader=reader)
    seconds = time.perf_counter() - start
    for name, tensor in state.items():
        assert torch.equal(tensor.to_local(), expected[name]), f"{name} restored wrongly"
    return counter[0], seconds


def rank_main(rank: int, args: argparse.Namespace, environment: dict, work: str, results: str) -> None:
    os.environ.update(environment)
    warnings.filterwarnings("ignore", message=".*TypedStorage")  # torch 2.5.1's DCP, once per tensor
    dist.init_process_group("gloo", init_method=f"file://{work}/store", rank=rank, world_size=args.ranks)
    mesh = init_device_mesh("cpu", (args.ranks,))
    state = model_state(args.size_mb * MB, mesh)
    config = S3ClientConfig(force_path_style=True)  # a local endpoint (checkpoint_storage.py does the same)
    uri = f"s3://{BUCKET}/{PREFIX}"
    dcp.save(state, storage_writer=S3StorageWriter(REGION, uri, config, thread_count=2))
    dcp.save(state, checkpoint_id=f"{work}/shared")  # the FSx stand-in holds the same checkpoint
    dist.barrier()
    if rank == 0:  # what one node's sync downloads: the whole prefix (the same on every node)
        started, downloaded = time.perf_counter(), download_prefix(environment, Path(work) / "download")
        Path(work, "download.json").write_text(json.dumps([downloaded, time.perf_counter() - started]))
    dist.barrier()
    downloaded, download_seconds = json.loads(Path(work, "download.json").read_text())
    _, local_seconds = restore(state, FileSystemReader(f"{work}/download"))
    figures = {
        "full download": (downloaded, download_seconds + local_seconds),
        "direct read": restore(state, S3StorageReader(REGION, uri, config)),
        "shared dir": restore(state, FileSystemReader(f"{work}/shared")),
    }
    Path(results, f"rank_{rank}.json").write_text(json.dumps(figures))
    # torch 2.5.1 destroys a gloo group holding the GIL while its threads may still need it to free the last
    # load's tensors: a rank of the test's run hung there once. A barrier lets those frees finish first (as
    # train.py's distributed.settle does).
    dist.barrier()
    dist.destroy_process_group()


def download_prefix(environment: dict, target: Path) -> int:
    """Every object under the prefix, as SageMaker's sync fetches them: the bytes downloaded."""
    client, total = s3_client(environment), 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{PREFIX}/"):
        for item in page.get("Contents", []):
            path = target / item["Key"].removeprefix(f"{PREFIX}/")
            path.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(BUCKET, item["Key"], str(path))
            total += item["Size"]
    return total


def measure(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Per way: bytes per node (the largest over the ranks), the slowest rank's seconds, the byte ratio."""
    with local_s3(BUCKET) as environment, tempfile.TemporaryDirectory() as work:
        results = Path(work, "results")
        results.mkdir()
        mp.spawn(rank_main, args=(args, environment, work, str(results)), nprocs=args.ranks, join=True)
        ranks = [json.loads(p.read_text()) for p in sorted(results.glob("rank_*.json"))]
    figures = {
        way: {"bytes": max(r[way][0] for r in ranks), "seconds": max(r[way][1] for r in ranks)}
        for way in WAYS
    }
    for way in WAYS:
        figures[way]["ratio"] = figures[way]["bytes"] / figures["full download"]["bytes"]
    return figures


def main(argv=None) -> dict[str, dict[str, float]]:
    args = parse_args(argv)
    figures = measure(args)
    print(f"One DCP checkpoint of {args.size_mb} MB over {args.ranks} ranks (one rank per node), restored:")
    print(f"{'way':<14} {'MB per node':>12} {'seconds':>8} {'bytes / full download':>22}")
    for way, figure in figures.items():
        print(f"{way:<14} {figure['bytes'] / MB:>12.2f} {figure['seconds']:>8.2f} {figure['ratio']:>22.3f}")
    print(f"1 / ranks = {1 / args.ranks:.3f}")
    return figures


if __name__ == "__main__":
    main()
