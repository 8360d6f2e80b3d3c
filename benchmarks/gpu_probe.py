"""The measuring half of benchmarks/gpu_probe.sh (run that; it starts this under torchrun).

    gpu_probe.py check [--gpu]                     what is missing to run the probe, in one sentence
                                                   (exit 2), or nothing (exit 0); imports nothing first
    gpu_probe.py flags  SIZES --work DIR           train.py's flags for these sizes (one per line)
    gpu_probe.py measure SIZES --work DIR          (under torchrun, after train.py ran) every part's
                                                   measurement and the report, printed by rank 0

The report has one line per figure, each a ratio of two figures measured side by side in this run, or an
absolute that says what it is: (a) train.py against a bare loop of the same model, (b) the same bare loop
under FSDP1 as the SMP path wraps it against the bare loop of (a), (c) DCP async save against a raw write of
the same bytes, (d) --init-from peak device memory against the bound load_pretrained claims, (e) all-reduce
bandwidth against a device-local copy of the same bytes. Parts that cannot be measured on this device say
"n/a" and why.
"""

from __future__ import annotations

import argparse
import gc
import re
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "training_scripts"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from metrics import WARMUP_STEPS, throughput  # noqa: E402  (standard library only: `flags` stays fast)

MB = 10**6
GB = 10**9
ALL_REDUCE_ITERATIONS = 20


# What the probe needs; the check imports each in turn and names what fails.
REQUIRED_MODULES = ("numpy", "torch", "transformers", "safetensors")
# The paths the figures measure, by --parallelism (torch 2.5.1's FSDP2 runs on CUDA only: DDP on the CPU).
PATH_NAMES = {"fsdp": "FSDP2", "ddp": "DDP"}


def missing(gpu: bool) -> str | None:
    """One sentence naming what this interpreter lacks for the probe (a module, a CUDA build of torch, a
    visible GPU), or None. Installs nothing."""
    import importlib

    for module in REQUIRED_MODULES:
        try:
            importlib.import_module(module)
        except Exception as error:  # an ImportError, or a broken install raising anything on import
            return (
                f"gpu_probe: {sys.executable} cannot import {module} ({type(error).__name__}: {error}); "
                "run it with PYTHON= an interpreter that has numpy, torch, transformers and safetensors "
                "(the probe installs nothing)."
            )
    import torch

    if gpu and torch.version.cuda is None:
        return (
            f"gpu_probe: torch {torch.__version__} in {sys.executable} is a CPU-only build; run it with a "
            "CUDA build of torch (PyPI's 2.5.1 is one), or with --dry-run to check the probe on the CPU."
        )
    if gpu and torch.cuda.device_count() < 1:
        return (
            f"gpu_probe: torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU (no NVIDIA driver "
            "or device here, or CUDA_VISIBLE_DEVICES hides them); run it on a GPU machine, or with --dry-run "
            "to check the probe on the CPU."
        )
    return None


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=["flags", "measure"])
    parser.add_argument("--work", type=Path, required=True, help="scratch directory (data, model, logs)")
    parser.add_argument("--preset", required=True)
    parser.add_argument("--parallelism", required=True, choices=["fsdp", "ddp"])
    parser.add_argument("--seq-len", type=int, required=True)
    parser.add_argument("--micro-batch-size", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True, help="timed steps, after WARMUP_STEPS")
    parser.add_argument("--all-reduce-mb", type=int, required=True)
    return parser.parse_args(argv)


def train_flags(args: argparse.Namespace, init_from: Path | None = None) -> list[str]:
    """train.py's flags: one log line over every step after warm-up, no checkpoint, no validation."""
    steps = WARMUP_STEPS + args.steps
    flags = [
        "--parallelism", args.parallelism, "--seq-len", str(args.seq_len),
        "--micro-batch-size", str(args.micro_batch_size), "--grad-accum", "1",
        "--max-steps", str(steps), "--log-interval", str(steps), "--checkpoint-interval", str(10 * steps),
        "--train-dir", str(args.work / "data"), "--model-dir", str(args.work / "model"),
        "--checkpoint-dir", str(args.work / "checkpoints"),
    ]  # fmt: skip
    return [*flags, *(["--init-from", str(init_from)] if init_from else ["--model-preset", args.preset])]


def synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def max_over_ranks(value: float) -> float:
    import torch
    import torch.distributed as dist

    tensor = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)  # the default group serves host tensors (gloo)
    return tensor.item()


def bare_loop(args, runtime, config, train_args):
    """The model train.py builds (same flags: sharding, precision), then plain forward, backward and AdamW
    steps on random tokens: no clipping, no checks, no logging, no checkpoints. Returns (model, optimizer,
    tokens/s, MFU or None)."""
    from distributed import autocast_enabled
    from startup import build_parallel_model

    model = build_parallel_model(train_args, runtime, config).model
    return (model, *timed_steps(args, runtime, config, model, autocast_enabled(runtime, args.parallelism)))


def fsdp1_loop(args, runtime, config, train_args) -> tuple[float | None, float | None]:
    """The bare loop on the SMP path's own FSDP1 wrapping (smp.fsdp1_wrap: AWS's MixedPrecision bf16/bf16/
    fp32 on GPUs, decoder layers as units, model.delayed_initializer materializing each module), without
    torch.sagemaker (not on PyPI): its initializer is FSDP1's param_init_fn itself. (tokens/s, MFU|None)."""
    import torch
    from model import build_model, delayed_initializer
    from smp import fsdp1_wrap

    hf_model = build_model(config)
    torch.manual_seed(train_args.seed)
    initialize = delayed_initializer(hf_model, runtime.device, train_args.seed)
    model = fsdp1_wrap(hf_model, runtime.device, {}, param_init_fn=initialize)
    _, tokens_per_sec, mfu = timed_steps(args, runtime, config, model, autocast=False)
    return tokens_per_sec, mfu


def timed_steps(args, runtime, config, model, autocast: bool):
    """WARMUP_STEPS, then --steps timed forward/backward/AdamW steps on one random batch, from an idle device
    to an idle device as train.py times them. Returns (optimizer, tokens/s, MFU or None)."""
    import torch
    import torch.nn.functional as F
    from model_shapes import flops_per_token, peak_bf16_flops

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    batch = torch.randint(
        0, config.vocab_size, (args.micro_batch_size, args.seq_len + 1), device=runtime.device
    )
    for step in range(WARMUP_STEPS + args.steps):
        if step == WARMUP_STEPS:  # the same warm-up train.py's figure leaves out
            synchronize()
            start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=batch[:, :-1]).logits
        F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    synchronize()
    seconds = max_over_ranks(time.perf_counter() - start)
    peak = peak_bf16_flops(torch.cuda.get_device_name()) if torch.cuda.is_available() else None
    tokens_per_step = args.micro_batch_size * args.seq_len * runtime.dp_size
    tokens_per_sec, mfu = throughput(
        tokens_per_step,
        args.steps,
        seconds,
        flops_per_token(config.to_dict(), args.seq_len),
        peak and peak[1] * runtime.world_size,
    )
    return optimizer, tokens_per_sec, mfu


def host_tensors(tree) -> list:
    """Every tensor of a (nested) state dict, this rank's part, copied to the host."""
    import torch

    if isinstance(tree, dict):
        return [tensor for value in tree.values() for tensor in host_tensors(value)]
    if isinstance(tree, torch.Tensor):
        local = tree.to_local() if hasattr(tree, "to_local") else tree
        return [local.detach().float().cpu().contiguous()]
    return []


def async_save_against_raw_write(args, runtime, model, optimizer) -> dict:
    """Seconds of train.py's async save of this model and AdamW state (CheckpointManager: the blocking
    part, then until written), and of a raw write of the same bytes into the same directory."""
    import torch.distributed as dist
    from checkpoint import CheckpointManager, TrainState
    from checkpoint_throughput import raw_seconds

    state = TrainState(model, optimizer)
    manager = CheckpointManager(
        str(args.work / "checkpoints"), runtime, 2, True, {"fingerprint": "probe"}, lambda: None
    )
    dist.barrier()
    start = time.perf_counter()
    manager.save(state, {})
    synchronize()
    blocking = max_over_ranks(time.perf_counter() - start)
    manager.wait()
    written = max_over_ranks(time.perf_counter() - start)
    tensors = host_tensors(state.state_dict())
    nbytes = sum(tensor.nbytes for tensor in tensors)
    clear(args.work / "checkpoints", runtime)  # the disk holds one copy at a time (1b: 13 GB)
    raw = max_over_ranks(
        raw_seconds(dict(enumerate(tensors)), args.work / "checkpoints" / f"raw_rank_{runtime.rank}")
    )
    clear(args.work / "checkpoints", runtime)
    return {"blocking": blocking, "written": written, "raw": raw, "bytes": nbytes}


def clear(directory: Path, runtime) -> None:
    """Every rank's files under `directory` deleted (one machine: local rank 0 deletes), then an empty one."""
    import torch.distributed as dist

    dist.barrier()
    if runtime.local_rank == 0:
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
    dist.barrier()


def init_from_peak_memory(args, runtime) -> dict:
    """Peak device memory while train.py's model is built and loaded from --init-from (the model train.py
    exported), against the bound load_pretrained claims: this rank's parameters plus one chunk."""
    import torch
    from distributed import local_part
    from flags import parse_args as train_parse_args
    from model import LOAD_CHUNK_BYTES, model_config
    from startup import build_parallel_model

    train_args = train_parse_args(train_flags(args, init_from=args.work / "model"))
    config = model_config(train_args.model_preset, train_args.init_from, None, args.seq_len)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated() if torch.cuda.is_available() else 0
    model = build_parallel_model(train_args, runtime, config).model
    peak = torch.cuda.max_memory_allocated() - before if torch.cuda.is_available() else None
    shard = sum(local_part(p).numel() * p.element_size() for p in model.parameters())
    return {"peak": peak, "shard": shard, "chunk": LOAD_CHUNK_BYTES}


def all_reduce_against_copy(args, runtime) -> dict:
    """Seconds per all_reduce (SUM, fp32, in place) of --all-reduce-mb on the training backend, and per
    device-local copy of the same bytes."""
    import torch
    import torch.distributed as dist

    source = torch.ones(args.all_reduce_mb * MB // 4, device=runtime.device)
    target = torch.empty_like(source)

    def seconds_each(operation) -> float:
        for _ in range(3):  # communicator set-up, allocator
            operation()
        synchronize()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(ALL_REDUCE_ITERATIONS):
            operation()
        synchronize()
        return max_over_ranks((time.perf_counter() - start) / ALL_REDUCE_ITERATIONS)

    reduce = seconds_each(lambda: dist.all_reduce(source))
    copy = seconds_each(lambda: target.copy_(source))
    return {"all_reduce": reduce, "copy": copy, "bytes": source.nbytes}


def train_py_figures(log: str) -> tuple[float, float | None]:
    """tokens/s and MFU (a fraction, or None) of train.py's one train line."""
    rate = re.search(r"tokens_per_sec=([0-9.]+)", log)
    if rate is None:
        sys.exit(f"gpu_probe: train.py printed no tokens_per_sec:\n{log[-3000:]}")
    mfu = re.search(r"mfu_pct=([0-9.]+)", log)
    return float(rate.group(1)), float(mfu.group(1)) / 100 if mfu else None


def ratio(ours: float | None, theirs: float | None, unit: str, scale: float = 1.0, digits: int = 2) -> str:
    if ours is None or theirs is None:
        return "n/a"
    return f"{ours / scale:,.{digits}f} / {theirs / scale:,.{digits}f} {unit} = {ours / theirs:.3f}"


def report(args, runtime, figures: dict) -> None:
    import torch

    train_rate, train_mfu = train_py_figures((args.work / "train.log").read_text())
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    bare_rate, bare_mfu = figures["bare"]
    fsdp1_rate, fsdp1_mfu = figures["fsdp1"]
    save, load = figures["save"], figures["load"]
    ranks, path = runtime.world_size, PATH_NAMES[args.parallelism]
    no_mfu = " (no MFU: no GPU with a listed bf16 peak)"
    lines = [
        f"gpu_probe: {ranks} x {device}, torch {torch.__version__}, backend {runtime.backend}, "
        f"preset {args.preset}, {path}, {args.micro_batch_size} x {args.seq_len} tokens per rank "
        f"per step, {args.steps} timed steps after {WARMUP_STEPS} warm-up",
        f"(a) tokens/s train.py / bare loop ({path}): {ratio(train_rate, bare_rate, 'tokens/s', digits=1)}",
        f"(a) MFU train.py / bare loop ({path}): {ratio(train_mfu, bare_mfu, '%', scale=0.01)}"
        + ("" if train_mfu is not None else no_mfu),
        f"(b) tokens/s bare loop FSDP1 as the SMP path wraps it / bare loop ({path}): "
        f"{ratio(fsdp1_rate, bare_rate, 'tokens/s', digits=1)}",
        f"(b) MFU bare loop FSDP1 / bare loop ({path}): {ratio(fsdp1_mfu, bare_mfu, '%', scale=0.01)}"
        + ("" if fsdp1_mfu is not None else no_mfu),
        f"(c) async save blocking part / raw write of the same {save['bytes'] / MB:,.0f} MB: "
        f"{ratio(save['blocking'], save['raw'], 's', digits=3)}",
        f"(c) async save until written / raw write: {ratio(save['written'], save['raw'], 's', digits=3)} "
        f"(absolute: raw {save['bytes'] / save['raw'] / MB:,.0f} MB/s per rank)",
        f"(d) --init-from ({path}, chunked set_model_state_dict) peak device memory / bound (parameters "
        f"{load['shard'] / MB:,.0f} MB + one chunk {load['chunk'] / MB:,.0f} MB): "
        f"{ratio(load['peak'], load['shard'] + load['chunk'], 'MB', scale=MB, digits=0)}"
        + ("" if load["peak"] is not None else " (no device memory counter on CPU)"),
        all_reduce_line(runtime, figures["reduce"]),
    ]
    print("\n".join(lines), flush=True)


def all_reduce_line(runtime, reduce: dict | None) -> str:
    """(e): all_reduce against a local copy with algbw and busbw (absolutes, named); n/a on one rank, where
    no byte crosses a link."""
    if reduce is None:
        return "(e) all_reduce / device-local copy: n/a (1 rank)"
    ranks = runtime.world_size
    backend = runtime.backend.split(",")[-1].split(":")[-1]  # cpu:gloo,cuda:nccl: the GPU's
    algbw = reduce["bytes"] / reduce["all_reduce"]
    busbw = algbw * 2 * (ranks - 1) / ranks
    return (
        f"(e) all_reduce / device-local copy of {reduce['bytes'] / MB:,.0f} MB: "
        f"{ratio(reduce['all_reduce'], reduce['copy'], 'ms', scale=1e-3, digits=3)}; absolute: "
        f"torch.distributed {backend} over {ranks} ranks: algbw {algbw / GB:,.2f} GB/s, busbw "
        f"{busbw / GB:,.2f} GB/s (busbw = algbw x 2(n-1)/n)"
    )


def measure(args: argparse.Namespace) -> None:
    import torch
    from distributed import setup, teardown
    from flags import parse_args as train_parse_args
    from model import model_config

    runtime = setup("torchrun", {})
    train_args = train_parse_args(train_flags(args))
    config = model_config(train_args.model_preset, None, train_args.vocab_size, args.seq_len)
    model, optimizer, *bare = bare_loop(args, runtime, config, train_args)
    figures = {"bare": bare, "save": async_save_against_raw_write(args, runtime, model, optimizer)}
    del model, optimizer
    gc.collect()  # one model on the device at a time
    figures["fsdp1"] = fsdp1_loop(args, runtime, config, train_args)
    gc.collect()  # the device memory counted next is the loaded model's alone
    figures["load"] = init_from_peak_memory(args, runtime)
    figures["reduce"] = all_reduce_against_copy(args, runtime) if runtime.world_size > 1 else None
    if runtime.is_main:
        report(args, runtime, figures)
    torch.distributed.barrier()
    teardown()


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["check"]:  # before argparse and any import: `check [--gpu]`
        problem = missing(gpu=argv[1:] == ["--gpu"])
        if problem:
            print(problem, file=sys.stderr)
            sys.exit(2)
        return
    args = parse_args(argv)
    if args.part == "flags":
        print("\n".join(train_flags(args)))
    else:
        measure(args)


if __name__ == "__main__":
    main()
