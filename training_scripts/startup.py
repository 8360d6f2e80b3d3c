"""What happens before the first step: checks that fail early, the sharded model, the batch of a resumed run.

Each check ends the job before any training in one sentence, the same on every rank
(`distributed.agree`): a rank that finds a problem does not leave its peers to hang
or to print collective tracebacks.
"""

import argparse
import logging
import resource
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from checkpoint import Resumed
from checkpoint_storage import is_s3_uri
from data import SampleOrder, TokenDataset, UserError
from distributed import Runtime, agree, local_part, reduce_max, unwrap, wrap_model
from model import build_model, has_weights, identity, initialize, load_pretrained
from model_shapes import parameter_count
from optimizer import no_decay_names
from transformers import PretrainedConfig

log = logging.getLogger("train")


def check_writable(args: argparse.Namespace, runtime: Runtime) -> None:
    """Checkpoints and the final model must be writable now, not after hours of training."""
    problem = None
    for flag, directory in (("--checkpoint-dir", args.checkpoint_dir), ("--model-dir", args.model_dir)):
        if is_s3_uri(directory):  # an S3 store: the job's role decides, and tests/iam checks its grants
            continue
        probe = Path(directory) / f".write-test-rank-{runtime.rank}"
        try:
            probe.parent.mkdir(parents=True, exist_ok=True)
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as error:
            problem = problem or f"{flag} {directory} is not writable ({error.strerror})."
    _raise_agreed(runtime, problem)


def open_datasets(
    args: argparse.Namespace, runtime: Runtime, vocab_size: int
) -> tuple[TokenDataset, TokenDataset | None]:
    """The train and val channels, every shard checked: readable, whole token ids, ids in the vocabulary.

    The ranks share the token-id scan (each reads every world_size-th shard) and combine the results,
    so every rank names the same offending file.
    """
    problem, datasets = None, []
    try:
        datasets.append(TokenDataset(args.train_dir, args.seq_len, "train"))
        if args.val_dir:
            datasets.append(TokenDataset(args.val_dir, args.seq_len, "val"))
    except UserError as error:
        problem = str(error)
    _raise_agreed(runtime, problem)
    for dataset in datasets:
        # A tensor of its own, not a view of numpy memory: torch 2.5.1's gloo process group frees its last
        # work's tensors holding the GIL when it is destroyed, and freeing numpy memory waits for the GIL.
        largest = reduce_max(
            runtime, torch.tensor(dataset.largest_token_ids(runtime.rank, runtime.world_size))
        )
        dataset.check_vocabulary(largest.numpy(), vocab_size)
    return datasets[0], datasets[1] if len(datasets) > 1 else None


def _raise_agreed(runtime: Runtime, problem: str | None) -> None:
    problem = agree(runtime, problem)
    if problem:
        raise UserError(problem)


@dataclass
class ParallelModel:
    model: torch.nn.Module  # what trains: FSDP2-sharded, DDP- or SMP-wrapped
    hf_model: torch.nn.Module  # the transformers model inside it
    identity: dict  # model.identity of the unsharded model: recorded in checkpoints
    no_decay: set[str]  # parameter names without weight decay (optimizer.no_decay_names, before wrapping)
    reinitialize: Callable[[], None]  # back to the initial weights (after a failed checkpoint load)


def build_parallel_model(
    args: argparse.Namespace, runtime: Runtime, config: PretrainedConfig
) -> ParallelModel:
    """Build on the meta device, shard (or replicate), then materialize and initialize each rank's part."""
    model = build_model(config)
    model_identity = identity(model)
    no_decay = no_decay_names(model)  # by module type and name, before wrappers flatten or rename parameters

    def materialize(module: torch.nn.Module) -> None:
        initialize(module, model, runtime.device, args.seed, allocate=True)

    wrapped = wrap_model(
        model,
        runtime,
        args.parallelism,
        args.mp_parameters,
        args.activation_checkpointing,
        args.compile,
        materialize,
        seed=args.seed,
    )
    if has_weights(args.init_from):
        load_pretrained(wrapped, model, args.init_from, runtime.control_device)

    def reinitialize() -> None:
        if runtime.strategy != "smp":  # SMP initializes inside FSDP; a later load overwrites every tensor
            initialize(wrapped, model, runtime.device, args.seed, allocate=False)
        if has_weights(args.init_from):
            load_pretrained(wrapped, model, args.init_from, runtime.control_device)

    return ParallelModel(wrapped, unwrap(wrapped), model_identity, no_decay, reinitialize)


def dry_run(args: argparse.Namespace, runtime: Runtime, config: PretrainedConfig) -> None:
    """Build, shard and initialize the model; print what this rank holds and its peak host memory."""
    parallel = build_parallel_model(args, runtime, config)
    local_bytes = sum(local_part(p).numel() * p.element_size() for p in parallel.model.parameters())
    full_bytes = parameter_count(config.to_dict()) * 4
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    device = f" peak_device_bytes={torch.cuda.max_memory_allocated()}" if torch.cuda.is_available() else ""
    print(
        f"dry_run rank={runtime.rank} world_size={runtime.world_size} parameter_bytes={local_bytes} "
        f"full_model_fp32_bytes={full_bytes} peak_rss_bytes={peak_rss}{device}",
        flush=True,
    )
    dist.barrier(group=runtime.checkpoint_group)  # no rank tears down while another still prints


def sample_order(
    args: argparse.Namespace, runtime: Runtime, num_samples: int, resumed: Resumed | None
) -> SampleOrder:
    """The data order of this run; a resumed one continues the checkpoint's global batch and position.

    With another data-parallel size than the checkpoint's, gradient accumulation changes so that the
    global batch stays what it was (every step then reads the very samples of the uninterrupted run);
    where that is impossible the run stops unless --allow-global-batch-change.
    """
    grad_accum = args.grad_accum
    if resumed is None:
        return _order(args, runtime, num_samples, grad_accum)
    saved_batch = resumed.global_batch
    per_accum = args.micro_batch_size * runtime.dp_size
    if resumed.dp_size not in (None, runtime.dp_size) and saved_batch:
        if saved_batch % per_accum == 0:
            grad_accum = saved_batch // per_accum
            _warn_once(
                runtime,
                "Checkpoint %s was written by %d data-parallel ranks, this run has %d: gradient accumulation "
                "%d (instead of --grad-accum %d) keeps the global batch of %d sequences, so every step reads "
                "the samples the uninterrupted run would have read.",
                resumed.folder,
                resumed.dp_size,
                runtime.dp_size,
                grad_accum,
                args.grad_accum,
                saved_batch,
            )
        elif not args.allow_global_batch_change:
            raise UserError(
                f"Checkpoint {resumed.folder} was trained with a global batch of {saved_batch} sequences, "
                f"not a multiple of {runtime.dp_size} data-parallel ranks x --micro-batch-size "
                f"{args.micro_batch_size}: choose a micro-batch size that divides it, or pass "
                f"--allow-global-batch-change true to continue with {per_accum * args.grad_accum} "
                "sequences per step."
            )
    order = _order(args, runtime, num_samples, grad_accum, resumed)
    if saved_batch and order.global_batch != saved_batch:
        _warn_once(
            runtime,
            "The global batch changes from %d to %d sequences at step %d; the data continues where the "
            "checkpoint left it (epoch %d, sample %d of its order), and the peak LR scales with the batch.",
            saved_batch,
            order.global_batch,
            resumed.step,
            *order.start_position,
        )
    return order


def _warn_once(runtime: Runtime, message: str, *values) -> None:
    if runtime.is_main:  # every rank reaches the same conclusion
        log.warning(message, *values)


def _order(args, runtime, num_samples: int, grad_accum: int, resumed: Resumed | None = None) -> SampleOrder:
    order = SampleOrder(
        num_samples, args.seed, runtime.dp_rank, runtime.dp_size, args.micro_batch_size, grad_accum
    )
    if resumed is None:
        return order
    position = resumed.data_position
    if position is None:  # a marker from before positions were recorded: the step alone located it
        saved = SampleOrder(num_samples, args.seed, 0, 1, resumed.global_batch or order.global_batch, 1)
        position = saved.position(resumed.step)
    order.start_step, order.start_position = resumed.step, tuple(position)
    return order
