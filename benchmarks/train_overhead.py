"""How much train.py costs over a bare training loop, and how much an async checkpoint saves.

    python benchmarks/train_overhead.py [--preset tiny --seq-len 256 --micro-batch-size 8 --steps 60]

Both figures are ratios of runs made side by side, alternating, in this one
invocation (these machines are noisy):

1. throughput: tokens/s of train.py (DDP) over a minimal hand-written DDP loop
   on the same model, batch and process count (goal >= 0.95);
2. checkpoint stall: extra wall time of training steps that include an async
   save, over the extra time of a synchronous save (lower is better).

Runs on CPU (gloo, 2 processes) or on GPUs (NCCL, one process per GPU).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "training_scripts"
sys.path.insert(0, str(SCRIPTS))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=60, help="timed steps per throughput run")
    parser.add_argument("--repeats", type=int, default=2, help="alternating runs of each side")
    parser.add_argument("--checkpoint-preset", default="tiny")
    parser.add_argument(
        "--checkpoint-vocab-size",
        type=int,
        default=65536,
        help="a vocabulary large enough that a save takes measurable time",
    )
    parser.add_argument("--nproc", type=int, default=None, help="processes (default: GPUs, or 2 on CPU)")
    parser.add_argument("--worker", choices=["minimal", "checkpoint"], help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


WARMUP_STEPS = 10


# ---------------------------------------------------------------- workers (run under torchrun)


def minimal_ddp_loop(args: argparse.Namespace) -> None:
    """The baseline: model, AdamW, clipping, DDP; batches prepared up front; nothing else."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from model import build_model
    from torch.nn.parallel import DistributedDataParallel

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    torch.manual_seed(0)
    model = build_model(args.preset, None, None).to(device)
    model = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    vocab = model.module.config.vocab_size
    batches = torch.randint(0, vocab, (8, args.micro_batch_size, args.seq_len + 1), device=device)
    for step in range(WARMUP_STEPS + args.steps):
        if step == WARMUP_STEPS:
            if cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
        batch = batches[step % len(batches)]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
            logits = model(input_ids=batch[:, :-1]).logits
        loss = F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    loss.item()  # waits for the GPU
    seconds = time.perf_counter() - start
    if rank == 0:
        print(f"tokens_per_sec={args.steps * args.micro_batch_size * args.seq_len * world / seconds:.1f}")
    del model, optimizer  # a DDP model outliving its process group can hang in its destructor (gloo)
    dist.destroy_process_group()


def checkpoint_stall(args: argparse.Namespace) -> None:
    """Wall time of a few training steps: without a save, with a sync save, with an async save."""
    import torch
    import torch.nn.functional as F
    from checkpoint import CheckpointManager, TrainState
    from distributed import setup, teardown, wrap_model
    from model import build_model

    runtime = setup("torchrun", {})
    torch.manual_seed(0)
    model = build_model(args.checkpoint_preset, None, args.checkpoint_vocab_size)
    model = wrap_model(model, runtime, "ddp", {}, False, False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    state = TrainState(model, optimizer)
    batch = torch.randint(0, args.checkpoint_vocab_size, (1, 65), device=runtime.device)

    def step() -> None:
        loss = F.cross_entropy(model(input_ids=batch[:, :-1]).logits.flatten(0, 1), batch[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # optimizer state exists from here on, as in a real save
    timings: dict[str, list[float]] = {"none": [], "sync": [], "async": []}
    with tempfile.TemporaryDirectory() as directory:
        for repeat in range(args.repeats + 1):
            for mode in timings:
                manager = CheckpointManager(
                    f"{directory}/{mode}", runtime, keep_last=1, async_save=mode == "async"
                )
                torch.distributed.barrier()
                start = time.perf_counter()
                for index in range(4):
                    step()
                    state.step += 1
                    if index == 0 and mode != "none":
                        manager.save(state)
                    manager.poll()
                manager.wait()  # an async save still running at the end is stall too
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                if repeat:  # the first round warms up allocator and files
                    timings[mode].append(time.perf_counter() - start)
    if runtime.is_main:
        none, sync, unblocked = (statistics.median(timings[mode]) for mode in ("none", "sync", "async"))
        megabytes = sum(p.numel() for p in model.parameters()) * 4 * 3 / 2**20  # weights + 2 Adam moments
        print(
            f"state_mb={megabytes:.1f} steps_s={none:.3f} "
            f"sync_stall_s={sync - none:.3f} async_stall_s={unblocked - none:.3f}"
        )
    teardown()


# ---------------------------------------------------------------- driver


def torchrun(nproc: int, *command: str) -> str:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={nproc}",
            *command,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode:
        sys.exit(f"benchmark run failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def train_py_tokens_per_sec(args: argparse.Namespace, nproc: int, data_dir: Path, out: Path) -> float:
    output = torchrun(
        nproc,
        str(SCRIPTS / "train.py"),
        "--model-preset",
        args.preset,
        "--parallelism",
        "ddp",
        "--seq-len",
        str(args.seq_len),
        "--micro-batch-size",
        str(args.micro_batch_size),
        "--max-steps",
        str(WARMUP_STEPS + args.steps),
        "--log-interval",
        str(WARMUP_STEPS),
        "--checkpoint-interval",
        "1000000",
        "--train-dir",
        str(data_dir),
        "--model-dir",
        str(out / "model"),
        "--checkpoint-dir",
        str(out / "checkpoints"),
    )
    intervals = [float(value) for value in re.findall(r"tokens_per_sec=([0-9.]+)", output)]
    steady = intervals[1:]  # the first interval holds the warm-up steps
    # Interval rates over equal step counts: the harmonic mean is the rate over all of them.
    return len(steady) / sum(1 / rate for rate in steady)


def main() -> None:
    args = parse_args()
    if args.worker == "minimal":
        return minimal_ddp_loop(args)
    if args.worker == "checkpoint":
        return checkpoint_stall(args)

    import torch

    nproc = args.nproc or torch.cuda.device_count() or 2
    worker_flags = [
        f"--preset={args.preset}",
        f"--seq-len={args.seq_len}",
        f"--steps={args.steps}",
        f"--micro-batch-size={args.micro_batch_size}",
        f"--repeats={args.repeats}",
        f"--checkpoint-preset={args.checkpoint_preset}",
        f"--checkpoint-vocab-size={args.checkpoint_vocab_size}",
    ]
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        (work / "data").mkdir()
        rng = np.random.default_rng(0)
        rng.integers(0, 500, 2_000_000).astype("<u2").tofile(work / "data" / "shard.bin")
        rates: dict[str, list[float]] = {"train.py": [], "minimal DDP loop": []}
        for repeat in range(args.repeats):
            rates["train.py"].append(
                train_py_tokens_per_sec(args, nproc, work / "data", work / f"run{repeat}")
            )
            output = torchrun(nproc, __file__, "--worker", "minimal", *worker_flags)
            rates["minimal DDP loop"].append(float(re.search(r"tokens_per_sec=([0-9.]+)", output).group(1)))
        stall = dict(
            re.findall(
                r"(\w+)=([-0-9.]+)", torchrun(nproc, __file__, "--worker", "checkpoint", *worker_flags)
            )
        )

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    print(
        f"{nproc} processes on {device}; preset {args.preset}, "
        f"{args.micro_batch_size} x {args.seq_len} tokens per rank per step, "
        f"{args.steps} timed steps, {args.repeats} alternating runs each"
    )
    for name, values in rates.items():
        print(f"  {name:18s} tokens/s: " + ", ".join(f"{value:,.0f}" for value in values))
    # Each pair ran back to back, under the same background load: compare within pairs.
    ratios = [ours / bare for ours, bare in zip(rates["train.py"], rates["minimal DDP loop"], strict=True)]
    print(
        "throughput ratio train.py / minimal DDP loop, per pair: "
        + ", ".join(f"{ratio:.3f}" for ratio in ratios)
        + f"; median {statistics.median(ratios):.3f} (goal >= 0.95)"
    )
    sync, unblocked = float(stall["sync_stall_s"]), float(stall["async_stall_s"])
    print(
        f"checkpoint stall ({args.checkpoint_preset}, vocabulary {args.checkpoint_vocab_size}, "
        f"{float(stall['state_mb']):.0f} MB of state per rank; 4 steps of {float(stall['steps_s']):.2f} s): "
        f"sync {sync:.3f} s, async {unblocked:.3f} s, ratio async / sync {unblocked / sync:.3f}"
    )


if __name__ == "__main__":
    main()
