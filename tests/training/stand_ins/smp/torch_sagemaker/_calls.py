"""The stand-in's record of SMP-relevant calls, in order, and the order rules it enforces.

Each rank appends one JSON line per call to `$TORCH_SAGEMAKER_STAND_IN_LOG/calls_rank<RANK>.jsonl` (when
the variable is set), so a test reads what the training script did on every rank.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

CALLS: list[dict] = []

# The order AWS's SMP v2 example follows (amazon-sagemaker-examples @7378156,
# training/distributed_training/pytorch/model_parallel_v2/shared-scripts/train_lib.py): tsm.init (426),
# transform (516-534), DelayedParamIniter (536-542), FSDP (590-607), optimizer (635-639). What the
# stand-in enforces of it, with the source of each rule, is in __init__.py.


def record(call: str, **details) -> None:
    entry = {"call": call, **details}
    CALLS.append(entry)
    directory = os.environ.get("TORCH_SAGEMAKER_STAND_IN_LOG")
    if directory:
        path = Path(directory) / f"calls_rank{os.environ.get('RANK', '0')}.jsonl"
        with path.open("a") as file:
            file.write(json.dumps(entry, default=str) + "\n")


def called(call: str) -> bool:
    return any(entry["call"] == call for entry in CALLS)


def require_before(call: str, later: str) -> None:
    """`call` must come before any `later` call, and after tsm.init."""
    if not called("init"):
        raise RuntimeError(f"torch.sagemaker stand-in: {call} before torch.sagemaker.init() ({INIT_FIRST}).")
    if called(later):
        raise RuntimeError(f"torch.sagemaker stand-in: {call} after {later} ({ORDER}).")


INIT_FIRST = (
    "AWS, 'Use the SageMaker model parallelism library v2', step 1: import torch.sagemaker and call "
    "torch.sagemaker.init() at the top of the training script"
)
ORDER = (
    "AWS's SMP v2 example, train_lib.py:426-639: tsm.init, transform, DelayedParamIniter, FSDP, optimizer; "
    "torch 2.5.1 fully_sharded_data_parallel.py:152-154: the optimizer after wrapping"
)
