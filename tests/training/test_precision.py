"""Compute precision per path: FSDP2 on GPU casts by its mixed-precision policy, not by autocast."""

from __future__ import annotations

import distributed  # noqa: E402  (training_scripts/ is on sys.path, as in /opt/ml/code)
import pytest
import smp
import torch
import torch.distributed as dist
import torch.nn.functional as F
from model import build_model, initialize, model_config


def _runtime(device: str, strategy: str = "torchrun") -> distributed.Runtime:
    return distributed.Runtime(
        strategy=strategy,
        backend="gloo",
        rank=0,
        world_size=1,
        local_rank=0,
        dp_rank=0,
        dp_size=1,
        device=torch.device(device),
        checkpoint_group=None,
    )


@pytest.mark.parametrize(
    ("device", "strategy", "parallelism", "autocast"),
    [
        ("cuda", "torchrun", "fsdp", False),  # FSDP2's policy casts
        ("cuda", "smddp", "fsdp", False),
        ("cuda", "torchrun", "ddp", True),
        ("cuda", "smddp", "ddp", True),
        ("cuda", "smp", "fsdp", False),  # SMP's FSDP1 casts by AWS's MixedPrecision (smp.py)
        ("cpu", "torchrun", "fsdp", False),  # CPU: fp32 throughout
        ("cpu", "torchrun", "ddp", False),
    ],
)
def test_autocast_runs_only_where_no_fsdp2_policy_casts(device, strategy, parallelism, autocast):
    assert distributed.autocast_enabled(_runtime(device, strategy), parallelism) is autocast


def test_fsdp2_policy_is_bf16_compute_with_fp32_reduction_on_gpu_and_fp32_on_cpu():
    gpu, cpu = distributed.fsdp_mixed_precision("cuda"), distributed.fsdp_mixed_precision("cpu")
    assert (gpu.param_dtype, gpu.reduce_dtype) == (torch.bfloat16, torch.float32)
    assert (cpu.param_dtype, cpu.reduce_dtype) == (None, None)


def test_smps_fsdp1_policy_is_awss_bf16_gathers_and_reductions_with_fp32_buffers_on_gpu_and_none_on_cpu():
    """AWS's SMP v2 example, train_lib.py:569-575 (amazon-sagemaker-examples @7378156)."""
    gpu = smp.fsdp1_mixed_precision("cuda")
    assert (gpu.param_dtype, gpu.reduce_dtype, gpu.buffer_dtype) == (
        torch.bfloat16,
        torch.bfloat16,
        torch.float32,
    )
    assert smp.fsdp1_mixed_precision("cpu") is None


@pytest.fixture
def world_of_one(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.newer_stack  # FSDP2 in torch 2.5.1 needs CUDA
def test_fsdp_wrapping_on_the_gpu_path_gathers_bf16_and_keeps_fp32_shards_and_gradients(
    world_of_one, monkeypatch
):
    """wrap_model with the GPU policy forced onto a CPU run: the forward computes in bf16 without
    autocast, while the sharded weights and their reduced gradients stay fp32."""
    gpu_policy = distributed.fsdp_mixed_precision("cuda")
    monkeypatch.setattr(distributed, "fsdp_mixed_precision", lambda device_type: gpu_policy)
    runtime = _runtime("cpu")
    config = model_config("tiny", None, None, 32)
    model = build_model(config)
    wrapped = distributed.wrap_model(
        model,
        runtime,
        "fsdp",
        {},
        False,
        False,
        lambda module: initialize(module, model, runtime.device, 0, allocate=True),
        seed=0,
    )
    tokens = torch.randint(0, config.vocab_size, (2, 33))
    logits = wrapped(input_ids=tokens[:, :-1]).logits
    assert logits.dtype == torch.bfloat16
    F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten()).backward()
    assert {p.dtype for p in wrapped.parameters()} == {torch.float32}
    assert {p.grad.dtype for p in wrapped.parameters()} == {torch.float32}
