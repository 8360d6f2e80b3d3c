"""Rank-0 metric log lines and the SageMaker MetricDefinitions that parse them.

The format and the regexes live here together so they cannot drift apart. The
pipeline imports this module (`from training_scripts.metrics import
METRIC_DEFINITIONS`), so it uses the standard library only and no sibling modules.
"""

import re

# A number as Python prints floats, including nan and inf: a diverging run must show in the charts.
_NUMBER = r"([-+]?(?:[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|nan|inf))"

METRIC_DEFINITIONS: list[dict] = [
    {"Name": "train:loss", "Regex": rf"train_loss={_NUMBER}"},
    {"Name": "validation:loss", "Regex": rf"val_loss={_NUMBER}"},
    {"Name": "train:grad_norm", "Regex": rf"grad_norm={_NUMBER}"},
    {"Name": "train:tokens_per_second", "Regex": rf"tokens_per_sec={_NUMBER}"},
    {"Name": "train:mfu_percent", "Regex": rf"mfu_pct={_NUMBER}"},
]


def format_train_line(
    step: int,
    max_steps: int,
    loss: float,
    grad_norm: float,
    lr: float,
    tokens_per_sec: float,
    mfu: float | None,
) -> str:
    """One line per logging interval (loss and gradient norm: means over it); `mfu` is a fraction, or
    None where it is unknown (CPU)."""
    line = (
        f"step={step}/{max_steps} train_loss={loss:.4f} grad_norm={grad_norm:.4f} lr={lr:.3e} "
        f"tokens_per_sec={tokens_per_sec:.1f}"
    )
    if mfu is not None:
        line += f" mfu_pct={100 * mfu:.2f}"
    return line


def format_val_line(step: int, loss: float) -> str:
    return f"step={step} val_loss={loss:.4f}"


# How long the training loop stood still for a checkpoint save (async saves: the snapshot only; the run
# report's goodput ledger counts it as checkpoint saving).
CHECKPOINT_PAUSE = re.compile(r"checkpoint_step=(\d+) paused_seconds=([0-9.]+)")


def format_checkpoint_pause_line(step: int, seconds: float) -> str:
    return f"checkpoint_step={step} paused_seconds={seconds:.3f}"


def parse_metrics(text: str) -> dict[str, list[float]]:
    """Every value each MetricDefinition finds in `text`, as SageMaker would extract them."""
    return {
        definition["Name"]: [float(value) for value in re.findall(definition["Regex"], text)]
        for definition in METRIC_DEFINITIONS
    }
