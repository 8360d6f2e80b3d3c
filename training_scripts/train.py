"""Train a Llama-family causal LM on uint16 token shards, on SageMaker or locally.

    torchrun --nproc_per_node=2 train.py --model-preset tiny --train-dir data/train --max-steps 100

Hyperparameters arrive as `--name value` flags (flags.py; SageMaker passes them so);
`--max_steps` and `--max-steps` are the same flag. Directories default from
SageMaker's environment. See docs/training.md.
"""

import garbage_collection

if __name__ == "__main__":
    garbage_collection.automatic_off()  # before torch's imports: the loop collects (garbage_collection.py)

import argparse
import logging
import math
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from capacity_block import STOP_PLAN_ENDING
from checkpoint import CheckpointManager, TrainState
from data import TokenDataset, validation_batches
from distributed import autocast_enabled, gradient_sync, local_part, reduce_max
from faults import NonFiniteError
from flags import parse_args, resume_source
from metrics import StepTimer, format_train_line, format_val_line, throughput
from model import model_config
from model_shapes import flops_per_token, peak_bf16_flops
from optimizer import parameter_groups
from rank_health import RankHealth
from startup import build_parallel_model, check_writable, dry_run, open_datasets, sample_order
from step_profiler import StepProfiler
from tensorboard_scalars import (
    GRAD_NORM,
    LEARNING_RATE,
    MFU_PERCENT,
    TOKENS_PER_SECOND,
    TRAIN_LOSS,
    VALIDATION_LOSS,
)
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from trainstack_runtime import Job, run
from transformers import PretrainedConfig
from transformers.utils import logging as transformers_logging
from watchdog import hang_if_injected

log = logging.getLogger("train")


class Trainer:
    def __init__(
        self,
        job: Job,
        config: PretrainedConfig,
        train_data: TokenDataset,
        val_data: TokenDataset | None,
    ):
        args, runtime = job.settings, job.runtime
        self.job, self.args, self.runtime, self.train_data, self.val_data = (
            job, args, runtime, train_data, val_data,
        )  # fmt: skip
        self.watchdog = job.watchdog
        self.parallel = build_parallel_model(args, runtime, config)
        self.model = self.parallel.model
        self.autocast = autocast_enabled(runtime, args.parallelism)
        # MFU counts the matmul FLOPs only: the input embedding is a lookup (model_shapes.flops_per_token).
        self.flops_per_token = flops_per_token(config.to_dict(), args.seq_len)
        self.optimizer = torch.optim.AdamW(
            parameter_groups(self.model, self.parallel.no_decay, args.weight_decay),
            lr=args.learning_rate,
            betas=(0.9, 0.95),
            eps=1e-8,
        )
        self.state = TrainState(self.model, self.optimizer)
        self.checkpoints: CheckpointManager = job.checkpoint_manager(self.parallel.identity, self._reset)
        self.nonfinite_steps: list[int] = []  # the current run of consecutive skipped steps

    def _reset(self) -> None:
        """The state of a fresh run: initial weights, no optimizer moments, step 0."""
        self.parallel.reinitialize()
        self.optimizer.state.clear()
        self.state.step = 0

    def lr_at(self, step: int) -> float:
        warmup = min(self.args.warmup_steps, self.args.max_steps)
        if step < warmup:
            return self.peak_lr * (step + 1) / warmup
        progress = (step - warmup) / max(1, self.args.max_steps - warmup)
        floor = self.args.min_lr_ratio
        return self.peak_lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))

    def token_losses(self, batch: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of every predicted token, [batch, seq_len]."""
        batch = batch.to(self.runtime.device, non_blocking=True)
        inputs, targets = batch[:, :-1], batch[:, 1:]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.autocast):
            logits = self.model(input_ids=inputs).logits
        # The loss in fp32 whatever the compute dtype (bf16 on GPU: autocast's or FSDP's policy).
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none").view(
            targets.shape
        )

    def train_step(self, step: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """One optimizer step: this rank's mean loss, the global gradient norm, and why every rank stops
        after this step (0: none; capacity_block's STOP_SIGTERM or STOP_PLAN_ENDING, as any rank has it).
        A step whose loss or gradient norm is not finite on any rank changes no weight: skipped and
        counted."""
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(step)
        micro_batches = self.order.micro_batches(step)
        total = self._zero()
        for index, samples in enumerate(micro_batches):
            with gradient_sync(self.model, enabled=index == len(micro_batches) - 1):
                loss = self.token_losses(self.train_data.batch(samples)).mean() / len(micro_batches)
                loss.backward()
            total += loss.detach()
        grad_norm = self._clip_gradients()
        nonfinite, stop = self._agree(not bool(torch.isfinite(total + grad_norm)), self.job.own_stop())
        if nonfinite:
            self._skip(step, total, grad_norm)
        else:
            self.nonfinite_steps.clear()
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total, grad_norm, stop

    def _clip_gradients(self) -> torch.Tensor:
        """Clip to --grad-clip (0: measure only) and return the global gradient norm."""
        max_norm = self.args.grad_clip or math.inf
        clip = getattr(self.model, "clip_grad_norm_", None)  # FSDP1 (SMP) shards need its own
        norm = clip(max_norm) if clip else torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        return norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # FSDP2: a DTensor

    def _agree(self, nonfinite: bool, stop: int) -> tuple[bool, int]:
        """Both flags as any rank has them, in one host collective per step (each rank sees only its
        own loss, signal and clock; all must skip, or stop, at the same step)."""
        flags = reduce_max(self.runtime, torch.tensor([int(nonfinite), stop]))
        return bool(flags[0]), int(flags[1])

    def _skip(self, step: int, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
        self.nonfinite_steps.append(step + 1)
        limit = self.args.max_nonfinite_steps
        if self.runtime.is_main:
            log.warning(
                "Step %d: loss %.4g, gradient norm %.4g; not finite on at least one rank: the update is "
                "skipped (%d of at most %d in a row).",
                step + 1,
                loss.item(),
                grad_norm.item(),
                len(self.nonfinite_steps),
                limit,
            )
        if len(self.nonfinite_steps) >= limit:
            raise NonFiniteError(
                f"Training diverged: the loss or gradient norm was not finite in {limit} consecutive steps "
                f"({self.nonfinite_steps[0]}-{self.nonfinite_steps[-1]}, each skipped), so training stops "
                f"with its checkpoints as they are: lower --learning-rate, or raise --max-nonfinite-steps to "
                f"skip more."
            )

    @torch.no_grad()
    def validation_loss(self) -> float:
        """Mean token loss over the same val samples whatever the number of ranks."""
        self.model.eval()
        batches, real = validation_batches(
            len(self.val_data),
            self.runtime.dp_rank,
            self.runtime.dp_size,
            self.args.micro_batch_size,
            self.args.val_batches,
        )
        totals = torch.zeros(2, dtype=torch.float64, device=self.runtime.device)  # loss sum, tokens
        for index, samples in enumerate(batches):
            counted = max(0, min(len(samples), real - index * len(samples)))
            losses = self.token_losses(self.val_data.batch(samples))[:counted]
            totals[0] += losses.double().sum()
            totals[1] += losses.numel()
        self.model.train()
        dist.all_reduce(totals, op=dist.ReduceOp.SUM)
        return (totals[0] / totals[1]).item()

    def _zero(self) -> torch.Tensor:
        return torch.zeros((), device=self.runtime.device)

    def _mean_over_ranks(self, value: torch.Tensor) -> float:
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        return value.item() / self.runtime.world_size

    def _weights_finite(self) -> bool:
        local = all(bool(torch.isfinite(local_part(p)).all()) for p in self.model.parameters())
        return not bool(reduce_max(self.runtime, torch.tensor([int(not local)])).item())

    def _check_weights(self, what: str) -> None:
        if not self._weights_finite():
            raise NonFiniteError(
                f"The weights at step {self.state.step} are not finite, so no {what} is written and training "
                "stops (earlier checkpoints are kept): lower --learning-rate."
            )

    def save_checkpoint(self, blocking: bool = False) -> None:
        step = self.state.step
        facts = {"global_batch": self.order.global_batch, "data_position": list(self.order.position(step))}
        with self.watchdog.extended("checkpoint save"):
            time.sleep(self.args.inject_save_delay_seconds)
            self._check_weights("checkpoint")
            self.checkpoints.save(self.state, facts, blocking=blocking)

    def run(self) -> None:
        args, state = self.args, self.state
        resumed = self.checkpoints.resume(state, args.resume_from, resume_source(args))
        self.order = sample_order(args, self.runtime, len(self.train_data), resumed)
        # Linear scaling rule: the LR grows with the global batch.
        self.peak_lr = args.learning_rate * self.order.global_batch / args.lr_reference_batch_size
        self.tokens_per_step = self.order.global_batch * args.seq_len
        if self.runtime.is_main:
            log.info(
                "Training %s on %d ranks (%s, %s): global batch %d sequences of %d tokens (gradient "
                "accumulation %d), peak LR %.3e, steps %d -> %d.",
                args.init_from or args.model_preset,
                self.runtime.world_size,
                self.runtime.strategy,
                args.parallelism,
                self.order.global_batch,
                args.seq_len,
                self.order.grad_accum,
                self.peak_lr,
                state.step,
                args.max_steps,
            )
        self.scalars = self.job.scalars(vars(args))
        self.model.train()
        window, window_steps = torch.zeros(2), 0
        # tokens/s and MFU: time inside training steps only (each with all its device work), warm-up left out
        timer = StepTimer(synchronize=self.runtime.synchronize)
        profiler = StepProfiler(args.profile_steps, args.profile_dir, self.runtime)
        health = RankHealth.start(args, self.runtime)  # slow hosts: each rank's share of the steps
        garbage_collection.collect_after(0)  # what building the model and resuming left
        while state.step < args.max_steps:
            hang_if_injected(args, self.runtime.rank, state.step + 1, resumed is not None)
            with profiler.step(state.step + 1), timer.timed(), health.timed():
                loss, grad_norm, stop = self.train_step(state.step)
            window += torch.stack([loss.detach().cpu(), grad_norm.detach().cpu().float()])
            window_steps += 1
            state.step += 1
            self.watchdog.step_completed(state.step)
            garbage_collection.collect_after(state.step)
            self.checkpoints.poll()
            if state.step % args.log_interval == 0 or state.step == args.max_steps:
                mean_loss = self._mean_over_ranks((window[0] / window_steps).to(self.runtime.device))
                self._log_progress(mean_loss, (window[1] / window_steps).item(), *timer.take())
                health.check(state.step, before_ending=lambda: self.save_checkpoint(blocking=True))
                window, window_steps = torch.zeros(2), 0
            if self.val_data and (state.step % args.val_interval == 0 or state.step == args.max_steps):
                with self.watchdog.extended("validation"):
                    val_loss = self.validation_loss()
                if self.runtime.is_main:
                    log.info(format_val_line(state.step, val_loss))
                    self.scalars.add(state.step, {VALIDATION_LOSS: val_loss})
            if stop:
                self.save_checkpoint(blocking=True)
                if stop == STOP_PLAN_ENDING:
                    self.scalars.close()
                    raise self.job.end_for_plan(state.step)
                if self.runtime.is_main:
                    log.info("Stopped by SIGTERM at step %d; the checkpoint resumes it.", state.step)
                self.scalars.close()
                return
            if state.step % args.checkpoint_interval == 0 and state.step < args.max_steps:
                self.save_checkpoint()
        with self.watchdog.extended("model export"):
            self.checkpoints.wait()
            self.save_model()
        self.scalars.close()

    def _log_progress(self, loss: float, grad_norm: float, timed_steps: int, seconds: float) -> None:
        if not self.runtime.is_main:
            return
        peak = peak_bf16_flops(torch.cuda.get_device_name()) if self.runtime.device.type == "cuda" else None
        every_gpu = peak and peak[1] * self.runtime.world_size
        tokens_per_sec, mfu = throughput(
            self.tokens_per_step, timed_steps, seconds, self.flops_per_token, every_gpu
        )
        lr = self.lr_at(self.state.step - 1)
        step, max_steps = self.state.step, self.args.max_steps
        log.info(format_train_line(step, max_steps, loss, grad_norm, lr, tokens_per_sec, mfu, peak))
        self.scalars.add(
            self.state.step,
            {
                TRAIN_LOSS: loss,
                GRAD_NORM: grad_norm,
                LEARNING_RATE: lr,
                TOKENS_PER_SECOND: tokens_per_sec,
                MFU_PERCENT: None if mfu is None else 100 * mfu,
            },
        )

    def save_model(self) -> None:
        """The model as transformers saves it (safetensors, sharded above 5 GB) with its config.json, in
        --export-dtype (bf16 by default: half the bytes to upload and to load)."""
        self._check_weights("model")
        # cpu_offload only off the host: torch 2.5.1's FSDP1 (SMP) offload of host tensors frees them before
        # cloning them (segfault in fsdp/_state_dict_utils.py param_hook, on 2 CPU ranks)
        offload = self.runtime.device.type != "cpu"
        full_state = get_model_state_dict(
            self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=offload)
        )
        if self.runtime.is_main:
            dtype = getattr(torch, self.args.export_dtype)
            for name, tensor in full_state.items():  # one tensor at a time: no second full copy
                full_state[name] = tensor.to(dtype)
            transformers_logging.disable_progress_bar()  # a bar per save in the job log says nothing
            hf_model = self.parallel.hf_model
            hf_model.save_pretrained(self.args.model_dir, state_dict=full_state, max_shard_size="5GB")
            # save_pretrained records the dtype of the model in memory (fp32), not of the files it wrote.
            hf_model.config.torch_dtype = dtype
            hf_model.config.save_pretrained(self.args.model_dir)
            log.info("Saved the model (%s) to %s.", self.args.export_dtype, self.args.model_dir)
        # No rank tears the process groups down while rank 0 still writes: all end together.
        dist.barrier(group=self.runtime.checkpoint_group)


def main(argv: list[str] | None = None) -> int:
    configs: list[PretrainedConfig] = []

    def parse(argv: list[str]) -> tuple[argparse.Namespace, dict]:
        """The flags and the model's config, both checked before any process group exists."""
        args = parse_args(argv)
        configs.append(model_config(args.model_preset, args.init_from, args.vocab_size, args.seq_len))
        return args, {}

    def train(job: Job) -> None:
        args, runtime, config = job.settings, job.runtime, configs[0]
        if args.dry_run:
            dry_run(args, runtime, config)
            return
        check_writable(args, runtime)
        train_data, val_data = open_datasets(args, runtime, config.vocab_size)
        job.start_watchdog()  # from the model build on: the data scan before it grows with the dataset
        Trainer(job, config, train_data, val_data).run()

    return run(train, argv, parse)


if __name__ == "__main__":
    garbage_collection.imports_done()
    sys.exit(main())
