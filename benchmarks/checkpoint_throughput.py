"""DCP's checkpoint write rate against the raw write rate of the same disk, side by side in one run.

    python benchmarks/checkpoint_throughput.py [--dir /opt/ml/checkpoints] [--size-mb 512] [--pairs 3]

Each pair writes the same fp32 state (tensors shaped like a Llama model's and its AdamW moments) into
`--dir` four times, back to back, in the order DCP, raw, raw, DCP: with torch.distributed.checkpoint
(FileSystemWriter, fsync on, as training_scripts/checkpoint.py saves) and as raw bytes, one sequential
stream into one file and one fsync (the disk's raw write rate). Pairs
run per DCP `thread_count`. Printed: MB/s of each and the ratio DCP / raw per pair,
with the median and the spread (min-max); goal >= 0.8. Run it on the disk a job checkpoints to and
give `trainstack plan --checkpoint-write-rate` the DCP figure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter

MB = 10**6


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", help="where to write (default: a temporary directory)")
    parser.add_argument("--size-mb", type=int, default=512, help="bytes per checkpoint, in MB")
    parser.add_argument("--pairs", type=int, default=3, help="DCP/raw pairs per thread count")
    parser.add_argument("--thread-counts", default="1,2,4,8", help="DCP FileSystemWriter thread_count values")
    return parser.parse_args(argv)


def model_like_state(size_bytes: int) -> dict[str, torch.Tensor]:
    """fp32 tensors of a Llama-like layer mix (hidden 1024): projections, an MLP and norms, each with two
    AdamW moments, repeated until `size_bytes`."""
    hidden, mlp = 1024, 2816
    layer = {
        "q": (hidden, hidden),
        "k": (hidden // 4, hidden),
        "v": (hidden // 4, hidden),
        "o": (hidden, hidden),
    }
    layer |= {
        "gate": (mlp, hidden),
        "up": (mlp, hidden),
        "down": (hidden, mlp),
        "norm1": (hidden,),
        "norm2": (hidden,),
    }
    state, index, total = {}, 0, 0
    generator = torch.Generator().manual_seed(0)
    while total < size_bytes:
        for name, shape in layer.items():
            for kind in ("weight", "exp_avg", "exp_avg_sq"):
                tensor = torch.randn(shape, generator=generator)
                state[f"layers.{index}.{name}.{kind}"] = tensor
                total += tensor.nbytes
        index += 1
    return state


def dcp_seconds(state: dict, directory: Path, thread_count: int) -> float:
    os.sync()  # the previous write's pages reach the disk before this one is timed
    start = time.perf_counter()
    dcp.save(state, storage_writer=FileSystemWriter(directory, thread_count=thread_count, sync_files=True))
    return time.perf_counter() - start


def raw_seconds(state: dict, directory: Path) -> float:
    """The same bytes as one sequential stream into one file, one fsync: the disk's raw write rate."""
    os.sync()
    start = time.perf_counter()
    directory.mkdir(parents=True)
    with open(directory / "state.bin", "wb") as handle:
        for tensor in state.values():
            handle.write(tensor.numpy().data)
        handle.flush()
        os.fsync(handle.fileno())
    return time.perf_counter() - start


def main(argv=None) -> None:
    args = parse_args(argv)
    warnings.filterwarnings("ignore")  # DCP warns that it runs without a process group: one process is meant
    root = Path(args.dir or tempfile.mkdtemp(prefix="checkpoint-throughput-"))
    root.mkdir(parents=True, exist_ok=True)
    state = model_like_state(args.size_mb * MB)
    size = sum(tensor.nbytes for tensor in state.values())
    print(f"{size / MB:,.0f} MB in {len(state)} fp32 tensors, written to {root}")
    best = None
    try:
        for thread_count in (int(value) for value in args.thread_counts.split(",")):
            ratios, dcp_rates, raw_rates = [], [], []
            for pair in range(args.pairs):
                # DCP, raw, raw, DCP: the order and any drift weigh on both alike (the second of two
                # back-to-back writes is the slower one on these machines).
                dcp_time = raw = 0.0
                for order, writer in enumerate(("dcp", "raw", "raw", "dcp")):
                    target = root / f"{writer}_{thread_count}_{pair}_{order}"
                    if writer == "dcp":
                        dcp_time += dcp_seconds(state, target, thread_count)
                    else:
                        raw += raw_seconds(state, target)
                    shutil.rmtree(target)
                dcp_rates.append(2 * size / dcp_time / MB)
                raw_rates.append(2 * size / raw / MB)
                ratios.append(raw / dcp_time)
            median = statistics.median(ratios)
            print(
                f"thread_count {thread_count}: DCP {statistics.median(dcp_rates):,.0f} MB/s, raw "
                f"{statistics.median(raw_rates):,.0f} MB/s; DCP/raw {median:.2f} "
                f"(pairs {', '.join(f'{ratio:.2f}' for ratio in ratios)}; "
                f"spread {min(ratios):.2f}-{max(ratios):.2f})"
            )
            if best is None or median > best[1]:
                best = (thread_count, median)
        print(f"best: thread_count {best[0]}, DCP/raw {best[1]:.2f} (goal >= 0.80)")
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
