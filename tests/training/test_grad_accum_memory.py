"""Gradient accumulation memory: what train.py's accumulation holds between micro-batches, measured on
CPU (2 ranks, gloo, tiny preset), equals the planner's gradient term, whatever grad_accum is.

FSDP reduce-scatters every micro-batch (distributed.gradient_sync), so a rank holds its shard of the
fp32 gradients; skipping the reduction would hold full-size unsharded gradients instead (torchtitan#292).
DDP's gradients are full-size on every rank either way."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from training_scripts.model_shapes import parameter_count
from trainstack.instances import InstanceType
from trainstack.planning.plans import Setup, plan
from trainstack.planning.setups import preset_shape

SCRIPT = Path(__file__).with_name("gradient_memory.py")
TWO_CPU_RANKS = InstanceType("two-ranks", 2, "A100", 40960, 8, bf16=True, efa=False, smddp=False)


def measured_gradient_bytes(parallelism: str) -> list[int]:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(SCRIPT),
            parallelism,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return [int(value) for value in re.findall(r"gradient_bytes=(\d+)", result.stdout)]


def planned_gradient_bytes(parallelism: str, grad_accum: int) -> int:
    setup = Setup(
        model="tiny",
        shape=preset_shape("tiny"),
        seq_len=32,
        micro_batch_size=2,
        grad_accum=grad_accum,
        activation_checkpointing=False,
        strategy="torchrun",
        parallelism=parallelism,
    )
    return plan(setup, TWO_CPU_RANKS, 1, None).memory.gradients


@pytest.mark.parametrize(
    "parallelism",
    [pytest.param("fsdp", marks=pytest.mark.newer_stack), "ddp"],  # FSDP2 in torch 2.5.1 needs CUDA
)
def test_accumulated_gradients_take_what_the_planner_counts(parallelism):
    planned = planned_gradient_bytes(parallelism, grad_accum=2)
    assert measured_gradient_bytes(parallelism) == [planned, planned]  # each rank
    # The count does not grow with grad_accum (a resume on fewer ranks raises it to keep the batch).
    assert planned_gradient_bytes(parallelism, grad_accum=8) == planned
    full = 4 * parameter_count(preset_shape("tiny"))  # fp32 gradients of the whole model
    assert planned == (full // 2 if parallelism == "fsdp" else full)
