"""Train a Llama-family causal LM on uint16 token shards, on SageMaker or locally.

    torchrun --nproc_per_node=2 train.py --model-preset tiny --train-dir data/train --max-steps 100

Hyperparameters arrive as `--name value` flags (SageMaker passes them so);
`--max_steps` and `--max-steps` are the same flag. Directories default from
SageMaker's environment. See docs/training.md.
"""

import argparse
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from checkpoint import CheckpointManager, TrainState, complete_checkpoints
from data import SampleOrder, TokenDataset, UserError, validation_batches
from distributed import PARALLELISMS, STRATEGIES, Runtime, gradient_sync, setup, teardown, unwrap, wrap_model
from metrics import format_train_line, format_val_line
from model import PRESETS, build_model, flops_per_token
from model_shapes import PEAK_BF16_FLOPS
from safetensors.torch import save_file
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

log = logging.getLogger("train")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one sentence instead of usage + message
        raise UserError(f"{message[0].upper()}{message[1:]}.")


def _boolean(text: str) -> bool:
    # SageMaker passes hyperparameter values as strings: "true", "True", "false", ...
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def _mp_parameters(text: str) -> dict:
    """SMP config as JSON, or as the toolkit passes a dict hyperparameter: `key=value,key=value`."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        pairs = [item.partition("=") for item in text.split(",")]
        value = (
            {key.strip(): _json_or_text(raw) for key, equals, raw in pairs}
            if all(key.strip() and equals for key, equals, _ in pairs)
            else None
        )
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f"expected a JSON object or key=value pairs such as tensor_parallel_degree=2, got {text!r}"
        )
    return value


def _json_or_text(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def build_parser() -> argparse.ArgumentParser:
    env = os.environ.get
    parser = _Parser(description=__doc__.split("\n")[0], allow_abbrev=False)
    add = parser.add_argument
    add("--strategy", choices=STRATEGIES, default="torchrun", help="launch strategy of the pipeline profile")
    add(
        "--parallelism",
        choices=PARALLELISMS,
        default="fsdp",
        help="data parallelism outside SMP: FSDP2 or DDP",
    )
    add(
        "--mp-parameters",
        type=_mp_parameters,
        help="SMP v2 config (JSON or key=value,...); defaults to SM_HP_MP_PARAMETERS",
    )
    add("--model-preset", choices=list(PRESETS), default="125m")
    add("--init-from", help="directory with config.json (and weights) to start from instead of a preset")
    add("--vocab-size", type=_positive, help="override the preset's vocabulary size")
    add("--seq-len", type=_positive, default=1024)
    add("--micro-batch-size", type=_positive, default=8, help="sequences per rank per forward pass")
    add("--grad-accum", type=_positive, default=1, help="micro-batches per optimizer step")
    add("--max-steps", type=_positive, default=1000)
    add("--learning-rate", type=float, default=3e-4, help="peak LR at --lr-reference-batch-size sequences")
    add(
        "--lr-reference-batch-size",
        type=_positive,
        default=256,
        help="global batch (sequences) the LR is given for; the LR scales linearly with the real one",
    )
    add("--warmup-steps", type=int, default=100)
    add("--min-lr-ratio", type=float, default=0.1, help="final LR of the cosine decay, relative to the peak")
    add("--weight-decay", type=float, default=0.1)
    add("--grad-clip", type=float, default=1.0, help="max gradient norm; 0 turns clipping off")
    add("--seed", type=int, default=0)
    add("--activation-checkpointing", type=_boolean, default=False)
    add("--compile", type=_boolean, default=False, help="torch.compile each decoder layer")
    add("--log-interval", type=_positive, default=10)
    add("--val-interval", type=_positive, default=200)
    add("--val-batches", type=_positive, default=20)
    add("--checkpoint-interval", type=_positive, default=200)
    add("--keep-checkpoints", type=_positive, default=2)
    add("--async-checkpoint", type=_boolean, default=False, help="write checkpoints while training continues")
    add("--train-dir", default=env("SM_CHANNEL_TRAIN"), help="defaults to SM_CHANNEL_TRAIN")
    add("--val-dir", default=env("SM_CHANNEL_VAL"), help="optional; defaults to SM_CHANNEL_VAL")
    add("--model-dir", default=env("SM_MODEL_DIR", "/opt/ml/model"))
    add("--checkpoint-dir", default="/opt/ml/checkpoints")
    add(
        "--resume-from",
        default=env("SM_CHANNEL_RESUME"),
        help="another run's checkpoint dir to start from when --checkpoint-dir holds none; "
        "defaults to SM_CHANNEL_RESUME",
    )
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    # SageMaker hyperparameter names usually use underscores; the flags use dashes.
    argv = [_dashed(arg) if arg.startswith("--") else arg for arg in argv]
    args, unknown = build_parser().parse_known_args(argv)
    for flag in [arg for arg in unknown if arg.startswith("--")]:
        if flag.startswith("--sagemaker-"):  # the toolkit's own settings, should any reach the script
            log.warning("Ignoring SageMaker setting %s.", flag)
        else:
            raise UserError(f"Unknown flag {flag}; run train.py --help for the accepted flags.")
    if args.mp_parameters is None:
        try:
            args.mp_parameters = _mp_parameters(os.environ.get("SM_HP_MP_PARAMETERS") or "{}")
        except argparse.ArgumentTypeError as error:
            raise UserError(f"SM_HP_MP_PARAMETERS: {error}.") from None
    if args.init_from and not (Path(args.init_from) / "config.json").is_file():
        raise UserError(f"--init-from {args.init_from} holds no config.json.")
    if (
        args.resume_from
        and not complete_checkpoints(Path(args.checkpoint_dir))
        and not complete_checkpoints(Path(args.resume_from))
    ):
        raise UserError(
            f"{_resume_source(args)} holds no complete checkpoint: it must be a run's checkpoint dir "
            "(in the pipeline its prefix s3://<checkpoint-bucket>/<runName>/), whose step_* folders "
            "end with a COMPLETE marker."
        )
    if args.train_dir is None:
        raise UserError(
            "No train channel: attach a channel named 'train' (SM_CHANNEL_TRAIN) or pass --train-dir."
        )
    return args


def _resume_source(args: argparse.Namespace) -> str:
    """How errors name the resume dir: by the channel SageMaker mounted or by the flag."""
    if args.resume_from == os.environ.get("SM_CHANNEL_RESUME"):
        return f"The resume channel ({args.resume_from})"
    return f"--resume-from {args.resume_from}"


def _dashed(flag: str) -> str:
    name, equals, value = flag.partition("=")
    return name.replace("_", "-") + equals + value


class Trainer:
    def __init__(
        self,
        args: argparse.Namespace,
        runtime: Runtime,
        train_data: TokenDataset,
        val_data: TokenDataset | None,
    ):
        self.args, self.runtime, self.train_data, self.val_data = args, runtime, train_data, val_data
        torch.manual_seed(args.seed)  # same initial weights on every rank
        model = build_model(args.model_preset, args.init_from, args.vocab_size)
        self.flops_per_token = flops_per_token(model, args.seq_len)
        self.model = wrap_model(
            model, runtime, args.parallelism, args.mp_parameters, args.activation_checkpointing, args.compile
        )
        self.order = SampleOrder(
            len(train_data),
            args.seed,
            runtime.dp_rank,
            runtime.dp_size,
            args.micro_batch_size,
            args.grad_accum,
        )
        # Linear scaling rule: the LR grows with the global batch.
        self.peak_lr = args.learning_rate * self.order.global_batch / args.lr_reference_batch_size
        decay = [p for p in self.model.parameters() if p.dim() >= 2]  # no decay on norms
        no_decay = [p for p in self.model.parameters() if p.dim() < 2]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=self.peak_lr,
            betas=(0.9, 0.95),
            eps=1e-8,
        )
        self.state = TrainState(self.model, self.optimizer)
        self.checkpoints = CheckpointManager(
            args.checkpoint_dir, runtime, args.keep_checkpoints, args.async_checkpoint
        )
        if val_data and not validation_batches(
            len(val_data), runtime.dp_rank, runtime.dp_size, args.micro_batch_size, args.val_batches
        ):
            raise UserError(
                f"The val channel holds {len(val_data)} samples, fewer than one validation batch of "
                f"{args.micro_batch_size * runtime.dp_size} (--micro-batch-size x data-parallel ranks)."
            )
        self.tokens_per_step = self.order.global_batch * args.seq_len
        # StopTrainingJob and Spot reclaims send SIGTERM about two minutes before the kill. The handler
        # holds the event, not the Trainer, so the model is freed before the process group is destroyed.
        sigterm = self._sigterm = threading.Event()
        signal.signal(signal.SIGTERM, lambda signum, frame: sigterm.set())

    def lr_at(self, step: int) -> float:
        warmup = min(self.args.warmup_steps, self.args.max_steps)
        if step < warmup:
            return self.peak_lr * (step + 1) / warmup
        progress = (step - warmup) / max(1, self.args.max_steps - warmup)
        floor = self.args.min_lr_ratio
        return self.peak_lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))

    def loss(self, batch: torch.Tensor) -> torch.Tensor:
        batch = batch.to(self.runtime.device, non_blocking=True)
        inputs, targets = batch[:, :-1], batch[:, 1:]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.runtime.device.type == "cuda"):
            logits = self.model(input_ids=inputs).logits
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())

    def train_step(self, step: int) -> torch.Tensor:
        """One optimizer step; returns this rank's mean loss (not synchronized)."""
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(step)
        micro_batches = self.order.micro_batches(step)
        total = self._zero()
        for index, samples in enumerate(micro_batches):
            with gradient_sync(self.model, enabled=index == len(micro_batches) - 1):
                loss = self.loss(self.train_data.batch(samples)) / len(micro_batches)
                loss.backward()
            total += loss.detach()
        if self.args.grad_clip > 0:
            clip = getattr(self.model, "clip_grad_norm_", None)  # FSDP1 (SMP) shards need its own
            if clip:
                clip(self.args.grad_clip)
            else:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total

    @torch.no_grad()
    def validation_loss(self) -> float:
        self.model.eval()
        batches = validation_batches(
            len(self.val_data),
            self.runtime.dp_rank,
            self.runtime.dp_size,
            self.args.micro_batch_size,
            self.args.val_batches,
        )
        total = self._zero()
        for samples in batches:
            total += self.loss(self.val_data.batch(samples))
        self.model.train()
        return self._mean_over_ranks(total / len(batches))

    def _zero(self) -> torch.Tensor:
        return torch.zeros((), device=self.runtime.device)

    def _mean_over_ranks(self, value: torch.Tensor) -> float:
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        return value.item() / self.runtime.world_size

    def _stop_agreed(self) -> bool:
        """True on every rank once any rank got SIGTERM, so all stop at the same step."""
        flag = torch.tensor([int(self._sigterm.is_set())])  # a host tensor: no GPU sync per step
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.runtime.control_group)
        return bool(flag.item())

    def run(self) -> None:
        args, state = self.args, self.state
        if not self.checkpoints.resume(state, args.resume_from) and args.resume_from:
            raise UserError(f"{_resume_source(args)} holds no checkpoint that loads (see the warnings).")
        if self.runtime.is_main:
            log.info(
                "Training %s on %d ranks (%s, %s): global batch %d sequences of %d tokens, peak LR %.3e, "
                "steps %d -> %d.",
                args.init_from or args.model_preset,
                self.runtime.world_size,
                self.runtime.strategy,
                args.parallelism,
                self.order.global_batch,
                args.seq_len,
                self.peak_lr,
                state.step,
                args.max_steps,
            )
        self.model.train()
        window_start, window_loss, window_steps = time.perf_counter(), self._zero(), 0
        while state.step < args.max_steps:
            window_loss += self.train_step(state.step)
            window_steps += 1
            state.step += 1
            self.checkpoints.poll()
            if state.step % args.log_interval == 0 or state.step == args.max_steps:
                loss = self._mean_over_ranks(window_loss / window_steps)
                self._log_progress(loss, window_steps, time.perf_counter() - window_start)
                window_start, window_loss, window_steps = time.perf_counter(), self._zero(), 0
            if self.val_data and (state.step % args.val_interval == 0 or state.step == args.max_steps):
                val_loss = self.validation_loss()
                if self.runtime.is_main:
                    log.info(format_val_line(state.step, val_loss))
            if self._stop_agreed():
                self.checkpoints.save(state, blocking=True)
                if self.runtime.is_main:
                    log.info("Stopped by SIGTERM at step %d; the checkpoint resumes it.", state.step)
                return
            if state.step % args.checkpoint_interval == 0 and state.step < args.max_steps:
                self.checkpoints.save(state)
        self.checkpoints.wait()
        self.save_model()

    def _log_progress(self, loss: float, steps: int, seconds: float) -> None:
        if not self.runtime.is_main:
            return
        tokens_per_sec = self.tokens_per_step * steps / seconds
        mfu = None
        if self.runtime.device.type == "cuda":
            name = torch.cuda.get_device_name()
            peak = next((flops for gpu, flops in PEAK_BF16_FLOPS.items() if gpu in name), None)
            if peak:
                mfu = self.flops_per_token * tokens_per_sec / (peak * self.runtime.world_size)
        log.info(
            format_train_line(
                self.state.step,
                self.args.max_steps,
                loss,
                self.lr_at(self.state.step - 1),
                tokens_per_sec,
                mfu,
            )
        )

    def save_model(self) -> None:
        """model.safetensors + config.json, loadable with AutoModelForCausalLM.from_pretrained."""
        full_state = get_model_state_dict(
            self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        if not self.runtime.is_main:
            return
        model_dir = Path(self.args.model_dir)
        model_dir.mkdir(parents=True, exist_ok=True)
        tensors, seen = {}, set()
        for name, tensor in full_state.items():
            if tensor.data_ptr() in seen:  # tied weights: from_pretrained re-ties them
                continue
            seen.add(tensor.data_ptr())
            tensors[name] = tensor.contiguous()
        save_file(tensors, model_dir / "model.safetensors", metadata={"format": "pt"})
        unwrap(self.model).config.save_pretrained(model_dir)
        log.info("Saved the model to %s.", model_dir)


def configure_logging(rank: int) -> None:
    # Rank 0 reports progress; the others only warnings and errors, marked with their rank.
    prefix = "" if rank == 0 else f"[rank {rank}] "
    logging.basicConfig(
        level=logging.INFO if rank == 0 else logging.WARNING,
        stream=sys.stdout,
        format=f"{prefix}%(asctime)s %(levelname)s %(message)s",
        force=True,
    )


def main(argv: list[str] | None = None) -> int:
    rank = int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    configure_logging(rank)
    try:  # flags and channels are checked alike on every rank: rank 0 reports
        args = parse_args(sys.argv[1:] if argv is None else argv)
        train_data = TokenDataset(args.train_dir, args.seq_len, _vocab_size(args), "train")
        val_data = (
            TokenDataset(args.val_dir, args.seq_len, _vocab_size(args), "val") if args.val_dir else None
        )
    except UserError as error:
        if rank == 0:
            log.error("%s", error)
        return 2
    runtime = setup(args.strategy, args.mp_parameters)
    try:
        Trainer(args, runtime, train_data, val_data).run()
    except UserError as error:  # found in data by one rank: it reports
        log.error("%s", error)
        return 2
    finally:
        teardown()
    return 0


def _vocab_size(args: argparse.Namespace) -> int:
    if args.init_from:
        return json.loads((Path(args.init_from) / "config.json").read_text())["vocab_size"]
    return args.vocab_size or PRESETS[args.model_preset]["vocab_size"]


if __name__ == "__main__":
    sys.exit(main())
