"""A training plan's planned interruption: train.py reads SageMaker's capacity-block end, checkpoints and ends
the attempt as `plan-ending` before SageMaker starts ending the instances (30 minutes before the block's
end); without a block it trains on. A real CPU run (torchrun, 2 processes, gloo), and the deadline on a
virtual clock."""

from __future__ import annotations

import time

import pytest
from capacity_block import EXPIRATION_ENV, INSTANCES_END_BEFORE_SECONDS, CapacityBlock

from tests.training.harness import train
from tests.training.test_train import complete_steps

MARGIN = 600.0  # --plan-stop-margin-seconds' default


def test_train_py_checkpoints_and_ends_the_attempt_before_the_plan_ends_its_instances(dataset, tmp_path):
    output = tmp_path / "output"
    # The block ends so soon that the stop time passed a minute ago: train.py stops after its first step.
    expires_ms = int((time.time() + INSTANCES_END_BEFORE_SECONDS + MARGIN - 60) * 1000)
    run = train(dataset, tmp_path, env={EXPIRATION_ENV: str(expires_ms), "SM_OUTPUT_DIR": str(output)})
    assert run.returncode != 0, run.output
    assert complete_steps(run.checkpoint_dir) == [1], run.output
    reason = (output / "failure").read_text()
    assert reason.startswith(
        "trainstack-fault:infrastructure:plan-ending TimeoutError: The training plan's capacity block ends "
        "this job's instances from "
    ), reason
    assert "stopped after the checkpoint of step 1; the run continues from it on the next instance" in reason
    assert not (run.model_dir / "model.safetensors").exists()


@pytest.mark.parametrize("value", ["0", ""])
def test_without_a_capacity_block_nothing_ends(value):
    assert not CapacityBlock(int(value or "0"), MARGIN, clock=lambda: 10.0**12).ending()


def test_the_stop_comes_the_margin_before_sagemaker_starts_ending_the_instances():
    now = [1_000_000.0]
    block_end = now[0] + 3600
    block = CapacityBlock(int(block_end * 1000), MARGIN, clock=lambda: now[0])
    assert block.instances_end == block_end - 30 * 60
    now[0] = block_end - 30 * 60 - MARGIN - 1
    assert not block.ending()
    now[0] += 1
    assert block.ending()
