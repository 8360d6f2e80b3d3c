"""train.py launched as SageMaker launches it: the real training toolkit against an /opt/ml tree.

The toolkit (sagemaker-training + sagemaker-pytorch-training, as in the image) reads the
hyperparameters the pipeline's job-request builder produces for a torchrun profile, starts
torchrun, which starts train.py; the job must end in a model and the toolkit's success file.
What differs from a real job, and why: SAGEMAKER_BASE_DIR points the toolkit at a temporary
tree instead of /opt/ml; SM_STUDIO_LOCAL_MODE=true stops it waiting for the host algo-1 to
resolve; with no GPU it would start one process, so sagemaker_mpi_num_of_processes_per_host
asks for two. The MPI and SMDDP launchers need sshd, mpirun and smddprun: not runnable here.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from localaws import opt_ml
from tests.domain.conftest import S3_RESOURCES
from tests.training.harness import load_weights, write_learnable_shards
from training_scripts.metrics import parse_metrics
from trainstack.job_request import base_request
from trainstack.profiles import Profile

TOOLKIT_CLI = Path(sys.executable).parent / "train"  # the image's ENTRYPOINT runs this


def torchrun_profile() -> Profile:
    return Profile(
        name="cpu-torchrun",
        strategy="torchrun",
        instance_preferences=[{"instance_type": "ml.g5.12xlarge", "instance_count": 1}],
        hyperparameters={
            "parallelism": "ddp",  # FSDP2 in the image's torch 2.5.1 needs CUDA
            "model_preset": "tiny",
            "seq_len": "32",
            "micro_batch_size": "2",
            "max_steps": "12",
            "learning_rate": "3e-3",
            "lr_reference_batch_size": "4",
            "warmup_steps": "2",
            "log_interval": "4",
            "val_interval": "12",
            "val_batches": "2",
            "checkpoint_interval": "6",
        },
    )


def job_hyperparameters(profile: Profile) -> dict[str, str]:
    return base_request(profile, S3_RESOURCES)["HyperParameters"]


def opt_ml_tree(base: Path, profile: Profile, hyperparameters: dict[str, str]) -> None:
    """What SageMaker lays out before it starts the container (the checkpoint dir comes from the flag)."""
    preference = profile.instance_preferences[0]
    opt_ml.lay_out(
        base,
        hyperparameters,
        opt_ml.resource_config(preference.instance_type, preference.instance_count),
        channels={"train": opt_ml.FILE_CHANNEL, "val": opt_ml.FILE_CHANNEL},
    )
    write_learnable_shards(base / "input" / "data" / "train", 8_000, seed=1)
    write_learnable_shards(base / "input" / "data" / "val", 2_000, seed=2)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(tmp_path: Path, **extra_hyperparameters: str) -> tuple[subprocess.CompletedProcess, Path, str]:
    """Run the toolkit on a torchrun profile's hyperparameters; (result, /opt/ml stand-in, output)."""
    profile = torchrun_profile()
    hyperparameters = job_hyperparameters(profile)
    assert json.loads(hyperparameters["sagemaker_torch_distributed_enabled"]) is True
    hyperparameters["sagemaker_mpi_num_of_processes_per_host"] = "2"  # CPU: see module docstring
    hyperparameters["checkpoint_dir"] = str(tmp_path / "checkpoints")  # /opt/ml/checkpoints on SageMaker
    hyperparameters.update(extra_hyperparameters)
    base = tmp_path / "ml"
    opt_ml_tree(base, profile, hyperparameters)
    environment = {
        **os.environ,
        "SAGEMAKER_BASE_DIR": str(base),
        "SM_STUDIO_LOCAL_MODE": "true",
        "SAGEMAKER_TRAINING_MODULE": "sagemaker_pytorch_container.training:main",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        # torchrun's --master-port (the toolkit passes none: 29500) from its environment: a port of its own,
        # so that toolkit runs on one machine do not collide.
        "PET_MASTER_PORT": str(free_port()),
    }
    result = subprocess.run([str(TOOLKIT_CLI)], env=environment, capture_output=True, text=True, timeout=300)
    return result, base, result.stdout + result.stderr


def test_the_toolkit_starts_torchrun_and_train_py_writes_the_model(tmp_path):
    result, base, output = launch(tmp_path)

    assert result.returncode == 0, output
    assert (base / "output" / "success").exists(), output
    assert "torchrun" in output and "--nproc_per_node 2" in output, output
    assert "Training tiny on 2 ranks (torchrun, ddp)" in output
    assert len(parse_metrics(output)["train:loss"]) == 3
    assert {p.name for p in (base / "model").iterdir()} >= {"model.safetensors", "config.json"}
    # Exported in bf16 by default, and its config.json says so: transformers loads it as bf16 with "auto".
    assert {tensor.dtype for tensor in load_weights(base / "model").values()} == {torch.bfloat16}
    model = AutoModelForCausalLM.from_pretrained(base / "model", torch_dtype="auto")
    assert {parameter.dtype for parameter in model.parameters()} == {torch.bfloat16}
    assert (tmp_path / "checkpoints" / "step_000000006" / "COMPLETE").exists()


def test_a_hang_ends_the_job_with_the_watchdogs_reason_which_the_toolkit_keeps(tmp_path):
    """The failure contract (docs/training.md, "Failure reasons and exit codes") through the real toolkit."""
    result, base, output = launch(
        tmp_path,
        watchdog_min_seconds="10",
        watchdog_step_multiple="1",
        inject_hang_at_step="8",
        inject_hang_rank="1",
    )
    assert result.returncode == 1, output  # the toolkit's own failure code
    reason = (base / "output" / "failure").read_text()  # SageMaker's FailureReason: its first 1024 characters
    # The toolkit's host name (SM_CURRENT_HOST) names where the rank that stopped ran.
    assert reason.startswith(
        "trainstack-fault:infrastructure:hang TimeoutError: Not waiting in a collective: rank 1 on algo-1 at "
        "watchdog.py:"
    ), reason
    assert "Failure file exists. Skipping creation" in output  # files.write_failure_file kept ours
    # What the toolkit would have written: torchrun's exit code, whatever the workers' (75).
    assert "ExecuteUserScriptError:\nExitCode 1\n" in output or "ExitCode 1" in output, output
    assert "trainstack-fault:infrastructure:hang" in output[output.index("ExitCode 1") :], output
