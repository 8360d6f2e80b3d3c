"""The llama-1b-smddp profile's path on CPU: the `smddp` backend of a stand-in SMDDP (tests/training/
stand_ins, enforcing AWS's documented restrictions: no new_group, no second backend) under torchrun."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import yaml
from transformers import AutoModelForCausalLM

from tests.conftest import DEFAULT_CONFIG
from tests.training.harness import REPO_ROOT, run_dirs, torchrun_command
from training_scripts.metrics import parse_metrics

STAND_INS = REPO_ROOT / "tests" / "training" / "stand_ins"
MAX_STEPS, CHECKPOINT_INTERVAL = 12, 6
# What makes the profile's model tiny and its run short; every other hyperparameter is the profile's.
TEST_SIZE = {
    "model_preset": "tiny",
    "seq_len": "32",
    "max_steps": str(MAX_STEPS),
    "checkpoint_interval": str(CHECKPOINT_INTERVAL),
    "lr_reference_batch_size": "16",
    "warmup_steps": "2",
    "log_interval": "3",
    "val_interval": "6",
    "val_batches": "2",
}


def with_stand_in() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(STAND_INS), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def profile_flags(name: str) -> list[str]:
    """train.py's flags as the job request passes them: the profile's hyperparameters and --strategy."""
    profile = next(p for p in yaml.safe_load(DEFAULT_CONFIG.read_text())["profiles"] if p["name"] == name)
    hyperparameters = {**profile["hyperparameters"], **TEST_SIZE, "strategy": profile["strategy"]}
    return [item for name, value in hyperparameters.items() for item in (f"--{name}", str(value))]


def test_the_smddp_profile_trains_checkpoints_and_exports_on_the_smddp_backend_alone(dataset, tmp_path):
    flags = profile_flags("llama-1b-smddp")
    assert flags[flags.index("--strategy") + 1] == "smddp"
    result = subprocess.run(
        torchrun_command(*flags, *run_dirs(dataset, tmp_path)),
        capture_output=True,
        text=True,
        timeout=600,
        env=with_stand_in(),
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "on 2 ranks (smddp, ddp)" in output, output  # no fallback to gloo
    assert "needs the SageMaker image" not in output
    assert (tmp_path / "checkpoints" / f"step_{CHECKPOINT_INTERVAL:09d}" / "COMPLETE").is_file()
    loss = parse_metrics(output)["train:loss"]
    assert loss[-1] < loss[0], loss
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    assert type(model).__name__ == "LlamaForCausalLM"


def test_smddp_refuses_async_checkpoints_in_one_sentence(dataset, tmp_path):
    flags = profile_flags("llama-1b-smddp")
    result = subprocess.run(
        torchrun_command(*flags, "--async-checkpoint", "true", *run_dirs(dataset, tmp_path)),
        capture_output=True,
        text=True,
        timeout=600,
        env=with_stand_in(),
    )
    assert result.returncode != 0
    assert "Argument --async-checkpoint: must be false with --strategy smddp" in result.stdout


@pytest.mark.parametrize(
    "second_group",
    ['dist.new_group(backend="gloo")', "dist.new_group()"],
    ids=["a gloo group", "an smddp subgroup"],
)
def test_the_stand_in_refuses_what_aws_says_smddp_cannot_do(second_group, tmp_path):
    """The stand-in fails the way the old distributed.setup would have failed on SageMaker."""
    script = textwrap.dedent(
        f"""
        import torch.distributed as dist
        import smdistributed.dataparallel.torch.torch_smddp
        dist.init_process_group("smddp", init_method="file://{tmp_path / "store"}", rank=0, world_size=1)
        dist.all_reduce(__import__("torch").ones(1))
        try:
            {second_group}
        except RuntimeError as error:
            print(error, flush=True)
        # Torn down before exit: torch 2.5.1 may abort ("terminate called without an active exception")
        # when the interpreter destroys a live gloo group at exit (1 of 3 CI runs).
        dist.barrier()
        dist.destroy_process_group()
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=with_stand_in()
    )
    assert result.returncode == 0, result.stderr
    assert "smddp backend cannot create process subgroups" in result.stdout
