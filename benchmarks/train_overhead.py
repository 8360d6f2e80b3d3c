"""How much train.py costs over a bare training loop, and how much an async checkpoint saves.

    python benchmarks/train_overhead.py [--preset tiny --seq-len 256 --micro-batch-size 8 --steps 60]

Both figures are ratios of runs made side by side, alternating, in this one
invocation (these machines are noisy):

1. throughput: tokens/s of train.py over a minimal hand-written loop with the
   same parallelism (FSDP2, train.py's default, and DDP) on the same model,
   batch and process count (goal >= 0.95);
2. checkpoint stall: extra wall time of training steps that include an async
   save, over the extra time of a synchronous save (lower is better), FSDP2
   and DDP.

Each figure is given per back-to-back pair (same background load), with the
median and the spread (min-max) over the pairs.

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
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs of each side (pairs)")
    parser.add_argument(
        "--parallelism", nargs="+", default=["fsdp", "ddp"], choices=["fsdp", "ddp"], help="paths to measure"
    )
    parser.add_argument("--checkpoint-preset", default="tiny")
    parser.add_argument(
        "--checkpoint-vocab-size",
        type=int,
        default=65536,
        help="a vocabulary large enough that a save takes measurable time",
    )
    parser.add_argument("--nproc", type=int, default=None, help="processes (default: GPUs, or 2 on CPU)")
    parser.add_argument("--worker", choices=["minimal", "checkpoint"], help=argparse.SUPPRESS)
    parser.add_argument("--worker-parallelism", default="fsdp", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


WARMUP_STEPS = 10


# ---------------------------------------------------------------- workers (run under torchrun)


def minimal_loop(args: argparse.Namespace) -> None:
    """The baseline: model, AdamW, clipping, DDP or FSDP2; batches prepared up front; nothing else."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from distributed import fully_shard
    from model import model_config
    from torch.nn.parallel import DistributedDataParallel
    from transformers import AutoModelForCausalLM

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    torch.manual_seed(0)
    config = model_config(args.preset, None, None, args.seq_len)
    model = AutoModelForCausalLM.from_config(config).to(device)
    if args.worker_parallelism == "ddp":
        model = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    else:
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    vocab = config.vocab_size
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
    from model import build_model, identity, initialize, model_config

    runtime = setup("torchrun", {})
    meta_model = build_model(model_config(args.checkpoint_preset, None, args.checkpoint_vocab_size, 64))
    model = wrap_model(
        meta_model,
        runtime,
        args.worker_parallelism,
        {},
        False,
        False,
        lambda module: initialize(module, meta_model, runtime.device, 0, allocate=True),
        seed=0,
    )
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
                    f"{directory}/{mode}",
                    runtime,
                    keep_last=1,
                    async_save=mode == "async",
                    model_identity=identity(meta_model),
                    reset=lambda: None,
                )
                torch.distributed.barrier()
                start = time.perf_counter()
                for index in range(4):
                    step()
                    state.step += 1
                    if index == 0 and mode != "none":
                        manager.save(state, {})
                    manager.poll()
                manager.wait()  # an async save still running at the end is stall too
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                if repeat:  # the first round warms up allocator and files
                    timings[mode].append(time.perf_counter() - start)
    if runtime.is_main:
        megabytes = identity(meta_model)["parameters"] * 4 * 3 / 2**20  # weights + 2 Adam moments, all ranks
        print(f"state_mb={megabytes:.1f} steps_s={statistics.median(timings['none']):.3f}")
        for none, sync, unblocked in zip(timings["none"], timings["sync"], timings["async"], strict=True):
            print(f"sync_stall_s={sync - none:.4f} async_stall_s={unblocked - none:.4f}")
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


def train_py_tokens_per_sec(
    args: argparse.Namespace, parallelism: str, nproc: int, data_dir: Path, out: Path
) -> float:
    output = torchrun(
        nproc,
        str(SCRIPTS / "train.py"),
        "--model-preset",
        args.preset,
        "--parallelism",
        parallelism,
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
    steady = intervals[1:]  # the first interval holds the minimal loop's warm-up (WARMUP_STEPS = 10 here)
    # Interval rates over equal step counts: the harmonic mean is the rate over all of them.
    return len(steady) / sum(1 / rate for rate in steady)


def spread(values: list[float]) -> str:
    """Every pair's value, the median and the min-max range."""
    listed = ", ".join(f"{value:.3f}" for value in values)
    return f"{listed}; median {statistics.median(values):.3f}, range {min(values):.3f}-{max(values):.3f}"


def main() -> None:
    args = parse_args()
    if args.worker == "minimal":
        return minimal_loop(args)
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
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    print(
        f"{nproc} processes on {device}; preset {args.preset}, "
        f"{args.micro_batch_size} x {args.seq_len} tokens per rank per step, "
        f"{args.steps} timed steps, {args.repeats} alternating pairs per path",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        (work / "data").mkdir()
        rng = np.random.default_rng(0)
        rng.integers(0, 500, 2_000_000).astype("<u2").tofile(work / "data" / "shard.bin")
        for parallelism in args.parallelism:
            flags = [*worker_flags, f"--worker-parallelism={parallelism}"]
            ours, bare = [], []
            for repeat in range(args.repeats):
                run_dir = work / f"{parallelism}{repeat}"

                def minimal(flags: list[str] = flags) -> float:
                    output = torchrun(nproc, __file__, "--worker", "minimal", *flags)
                    return float(re.search(r"tokens_per_sec=([0-9.]+)", output).group(1))

                # Alternate which side runs first: a background load that rises or falls during the
                # invocation would otherwise favour one side in every pair.
                if repeat % 2:
                    bare.append(minimal())
                    ours.append(train_py_tokens_per_sec(args, parallelism, nproc, work / "data", run_dir))
                else:
                    ours.append(train_py_tokens_per_sec(args, parallelism, nproc, work / "data", run_dir))
                    bare.append(minimal())
            print(f"{parallelism}: train.py tokens/s " + ", ".join(f"{v:,.0f}" for v in ours))
            print(f"{parallelism}: minimal loop tokens/s " + ", ".join(f"{v:,.0f}" for v in bare))
            # Each pair ran back to back, under the same background load: compare within pairs.
            ratios = [a / b for a, b in zip(ours, bare, strict=True)]
            print(
                f"{parallelism}: throughput ratio train.py / minimal loop per pair: "
                f"{spread(ratios)} (goal >= 0.95)"
            )
            output = torchrun(nproc, __file__, "--worker", "checkpoint", *flags)
            state = dict(re.findall(r"(state_mb|steps_s)=([-0-9.]+)", output))
            stalls = [
                (float(a), float(b))
                for a, b in re.findall(r"sync_stall_s=([-0-9.]+) async_stall_s=([-0-9.]+)", output)
            ]
            print(
                f"{parallelism}: checkpoint stall ({args.checkpoint_preset}, vocabulary "
                f"{args.checkpoint_vocab_size}, {float(state['state_mb']):.0f} MB of state; 4 steps of "
                f"{float(state['steps_s']):.2f} s), sync / async s per round: "
                + ", ".join(f"{sync:.3f} / {unblocked:.3f}" for sync, unblocked in stalls)
            )
            print(
                f"{parallelism}: checkpoint stall ratio async / sync per round: "
                f"{spread([unblocked / sync for sync, unblocked in stalls])}",
                flush=True,
            )


if __name__ == "__main__":
    main()
