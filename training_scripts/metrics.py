"""Rank-0 metric log lines and the SageMaker MetricDefinitions that parse them.

The format and the regexes live here together so they cannot drift apart, with the
step timer that tokens/s and MFU are computed from. The pipeline imports this module
(`from training_scripts.metrics import METRIC_DEFINITIONS`), so it uses the standard
library only and no sibling modules.
"""

import contextlib
import logging
import re
import sys
import time
from collections.abc import Callable, Iterator

# Steps after each start or resume that tokens/s and MFU leave out. The first step creates the NCCL
# communicators, compiles the blocks (--compile) and fills the CUDA allocator's cache; the second is the
# first with AdamW's moments (created lazily by the first optimizer step) and, with --compile, may compile
# again; the third is the first with every cache warm, kept out as a margin.
WARMUP_STEPS = 3

# A number as Python prints floats, including nan and inf: a diverging run must show in the charts.
_NUMBER = r"([-+]?(?:[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|nan|inf))"

# The metrics the pipeline reads back (DescribeTrainingJob's FinalMetricDataList) to refine
# `checkpoint_interval: auto` (stacks/pipeline/checkpoint_interval.py).
TOKENS_PER_SECOND_METRIC = "train:tokens_per_second"
CHECKPOINT_PAUSE_METRIC = "train:checkpoint_pause_seconds"

METRIC_DEFINITIONS: list[dict] = [
    {"Name": "train:loss", "Regex": rf"train_loss={_NUMBER}"},
    {"Name": "validation:loss", "Regex": rf"val_loss={_NUMBER}"},
    {"Name": "train:grad_norm", "Regex": rf"grad_norm={_NUMBER}"},
    {"Name": TOKENS_PER_SECOND_METRIC, "Regex": rf"tokens_per_sec={_NUMBER}"},
    {"Name": "train:mfu_percent", "Regex": rf"mfu_pct={_NUMBER}"},
    # The blocking part of each checkpoint save (format_checkpoint_pause_line).
    {"Name": CHECKPOINT_PAUSE_METRIC, "Regex": rf"paused_seconds={_NUMBER}"},
    {"Name": "train:slowest_rank_ratio", "Regex": rf"slowest_rank_ratio={_NUMBER}"},
]


class StepTimer:
    """Seconds spent inside training steps since the last `take`, the first `warmup_steps` steps of this
    process (a start or a resume) left out. Only what runs inside `timed()` counts, so validation,
    checkpoint saves (a synchronous one, or the blocking part of an async one) and logging between steps
    never lower tokens/s. `synchronize` waits for the device's queued work (on GPUs the host runs ahead of
    it): called at both ends of a step, as AWS's SMP example does around its whole step (train_lib.py:134,
    187), so a step's time holds all of its device work (the optimizer's last kernels too) and none of
    another's. `clock` and `synchronize` are injectable: tests drive a virtual clock and device."""

    def __init__(
        self,
        warmup_steps: int = WARMUP_STEPS,
        clock: Callable[[], float] = time.perf_counter,
        synchronize: Callable[[], None] = lambda: None,
    ):
        self.warmup_steps, self.clock, self.synchronize = warmup_steps, clock, synchronize
        self._finished = 0  # steps timed by this process, warm-up included
        self._steps, self._seconds = 0, 0.0

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        """Time one training step, from an idle device to an idle device."""
        self.synchronize()
        start = self.clock()
        yield
        self.synchronize()
        elapsed = self.clock() - start
        self._finished += 1
        if self._finished > self.warmup_steps:
            self._steps += 1
            self._seconds += elapsed

    def take(self) -> tuple[int, float]:
        """(timed steps, their seconds) since the last call; (0, 0.0) while every step was warm-up."""
        window = self._steps, self._seconds
        self._steps, self._seconds = 0, 0.0
        return window


def throughput(
    tokens_per_step: int, steps: int, seconds: float, flops_per_token: float, peak_flops: float | None
) -> tuple[float | None, float | None]:
    """tokens/s over `steps` timed steps and MFU as a fraction of `peak_flops` (every GPU's together; None:
    unknown, so no MFU). Both None for a window without a timed step (warm-up only)."""
    if steps == 0 or seconds <= 0:
        return None, None
    tokens_per_sec = tokens_per_step * steps / seconds
    mfu = flops_per_token * tokens_per_sec / peak_flops if peak_flops else None
    return tokens_per_sec, mfu


def format_train_line(
    step: int,
    max_steps: int,
    loss: float,
    grad_norm: float,
    lr: float,
    tokens_per_sec: float | None,
    mfu: float | None,
    peak: tuple[str, float] | None = None,
) -> str:
    """One line per logging interval (loss and gradient norm: means over it); `tokens_per_sec` None while
    every step of the interval was warm-up; `mfu` is a fraction, or None where it is unknown (CPU), of
    `peak`: (the GPU part, its dense bf16 FLOP/s), which the line names."""
    line = f"step={step}/{max_steps} train_loss={loss:.4f} grad_norm={grad_norm:.4f} lr={lr:.3e}"
    if tokens_per_sec is not None:
        line += f" tokens_per_sec={tokens_per_sec:.1f}"
    if mfu is not None:
        line += f" mfu_pct={100 * mfu:.2f}"
        if peak:
            line += f" mfu_peak={peak[0].replace(' ', '_')}:{peak[1] / 1e12:g}TFLOPS"
    return line


def format_val_line(step: int, loss: float) -> str:
    return f"step={step} val_loss={loss:.4f}"


# How long the training loop stood still for a checkpoint save (async saves: the snapshot only; the run
# report's goodput ledger counts it as checkpoint saving).
CHECKPOINT_PAUSE = re.compile(r"checkpoint_step=(\d+) paused_seconds=([0-9.]+)")


def format_checkpoint_pause_line(step: int, seconds: float) -> str:
    return f"checkpoint_step={step} paused_seconds={seconds:.3f}"


def parse_metrics(text: str, definitions: list[dict] | None = None) -> dict[str, list[float]]:
    """Every value each MetricDefinition (the training job's by default) finds in `text`, as SageMaker
    would extract them."""
    return {
        definition["Name"]: [float(value) for value in re.findall(definition["Regex"], text)]
        for definition in (METRIC_DEFINITIONS if definitions is None else definitions)
    }


def format_rank_balance_line(step: int, rank: int, host: str, ratio: float) -> str:
    """The slowest rank of the interval ending at `step` and its share of each step relative to the median of
    the other ranks' (training_scripts/rank_health.py; 2 or more flags a slow host)."""
    return f"step={step} slowest_rank={rank} slowest_host={host} slowest_rank_ratio={ratio:.2f}"


# A flagged slow host (rank_health.py); `trainstack report` and `status` read it from the job's log.
SLOW_HOST_LINE = re.compile(r"slow_host rank=(\d+) host=(\S+) ratio=([0-9.]+) intervals=(\d+) at_step=(\d+)")


def format_slow_host_line(
    rank: int, host: str, ratio: float, intervals: int, step: int, factor: float
) -> str:
    return (
        f"slow_host rank={rank} host={host} ratio={ratio:.2f} intervals={intervals} at_step={step}: rank "
        f"{rank}'s share of each step was at least {factor:g}x the median of the other ranks' in {intervals} "
        "log intervals in a row"
    )


# The evaluation output (evaluate.py, trainstack_runtime.write_evaluation) in the job's model dir.
EVALUATION_FILE = "evaluation.json"
# What evaluation.json's metrics are called: SageMaker publishes no schema for ModelQuality statistics of
# a language model; the shape follows AWS's Abalone example ({"<kind>_metrics": {name: {"value": v}}}).
METRICS_KEY = "language_model_metrics"
# The evaluation job's one line (evaluate.py) and the MetricDefinitions that put it into the job's
# FinalMetricDataList, which the pipeline's gate reads (docs/registry.md).
# evaluate.py's sample length when the run sets no seq_len hyperparameter (the gate records and compares it).
EVALUATION_DEFAULT_SEQ_LEN = 1024


def evaluation_metric_definition(name: str) -> dict:
    """An evaluation metric `evaluation:<name>`, read from the log line `eval_<name>=<number>`; a profile's
    own metric (registry_settings.EvaluationMetric) the same way as the product's."""
    return {"Name": f"evaluation:{name}", "Regex": rf"eval_{name}={_NUMBER}"}


EVALUATION_METRIC_DEFINITIONS: list[dict] = [
    evaluation_metric_definition(name) for name in ("loss", "perplexity", "tokens")
]


def format_evaluation_line(loss: float, perplexity: float, tokens: int) -> str:
    return f"eval_loss={loss:.6f} eval_perplexity={perplexity:.6f} eval_tokens={tokens}"


def configure_logging(rank: int) -> None:
    # Rank 0 reports progress; the others only warnings and errors, marked with their rank.
    prefix = "" if rank == 0 else f"[rank {rank}] "
    logging.basicConfig(
        level=logging.INFO if rank == 0 else logging.WARNING,
        stream=sys.stdout,
        format=f"{prefix}%(asctime)s %(levelname)s %(message)s",
        force=True,
    )
