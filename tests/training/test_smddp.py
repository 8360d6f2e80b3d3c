"""The llama-1b-smddp profile's path on CPU: the `smddp` backend of a stand-in SMDDP (tests/training/
stand_ins, enforcing AWS's documented restrictions: no new_group, no second backend) under torchrun."""

from __future__ import annotations

import json
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


# A backend registered as SMDDP registers (no `devices`; assumed, see the stand-in), gloo underneath, in a
# world of one: the group train.py creates for it, and what its agreements ask of torch.
OBJECT_COLLECTIVES = """
import argparse, json, sys
import torch, torch.distributed as dist
from torch.distributed import distributed_c10d as c10d
sys.path.insert(0, {scripts!r})
dist.Backend.register_backend("smddp", lambda store, rank, size, timeout: dist.ProcessGroupGloo(
    store, rank, size, timeout
))
from data import UserError
from distributed import Runtime, agree, select_strategy
from model import build_model, load_pretrained, model_config
from startup import check_writable

work = sys.argv[1]
devices = {{}}
for cuda in (True, False):  # a GPU machine's group (its device is only named), then this machine's
    strategy, backend, _ = select_strategy("smddp", False, True, cuda)
    dist.init_process_group(backend, init_method=f"file://{{work}}/store-{{cuda}}", rank=0, world_size=1)
    devices[backend] = str(c10d._get_pg_default_device())
    if cuda:
        dist.destroy_process_group()
choose = c10d._get_pg_default_device

def left_to_torch(group=None):
    raise RuntimeError("an object collective left its device to torch (the host: a backend without devices)")

c10d._get_pg_default_device = left_to_torch
runtime = Runtime(strategy, backend, 0, 1, 0, 0, 1, torch.device("cpu"), None)
results = {{"devices": devices, "agree": agree(runtime, "A problem.")}}
directories = argparse.Namespace(checkpoint_dir="/proc/x", model_dir=work)
meta_model = build_model(model_config("tiny", None, None, 32))
for name, call in (
    ("check_writable", lambda: check_writable(directories, runtime)),
    ("load_pretrained", lambda: load_pretrained(meta_model, meta_model, work, runtime.control_device)),
):
    try:
        call()
    except (UserError, RuntimeError) as error:
        results[name] = str(error)
c10d._get_pg_default_device = choose
dist.barrier()
dist.destroy_process_group()
print(json.dumps(results))
"""


def test_smddps_agreements_name_their_device_and_its_group_serves_the_gpu_alone(tmp_path):
    """torch 2.5.1 takes a backend registered without `devices` to serve the host and CUDA, and then runs
    object collectives (train.py's agreements, DCP's, barriers) on the host: SMDDP is GPU-only. The group is
    created for the device ("cuda:smddp"), and train.py's agreements pass device and group themselves."""
    script = OBJECT_COLLECTIVES.format(scripts=str(REPO_ROOT / "training_scripts"))
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    results = json.loads(result.stdout.strip().splitlines()[-1])
    assert results["devices"] == {"cuda:smddp": "cuda", "cpu:smddp": "cpu"}
    assert results["agree"] == "A problem."
    assert results["check_writable"].startswith("--checkpoint-dir /proc/x is not writable"), results
    assert results["load_pretrained"].startswith(f"--init-from {tmp_path} has no weights for"), results
