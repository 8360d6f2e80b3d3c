"""The memory model against what train.py's model really allocates on CPU.

Exact: parameter, gradient and AdamW bytes; the bytes each decoder layer and the loss head keep for
backward, in fp32 (train.py on CPU) and under bf16 autocast (train.py on GPU with DDP; CPU autocast
casts the same ops: linear and SDPA). Within a tolerance: the peak of a forward/backward pass, which
depends on when PyTorch frees temporaries. FSDP2 and SMP's FSDP1 on GPU compute with bf16 gathered
weights and no autocast: not measured here (CPU runs fp32); the planner counts them as autocast without
the weight copies (docs/plan.md), and tests/training/test_precision.py checks the policies train.py
applies.
"""

import functools
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "training_scripts"))

import model  # noqa: E402  (train.py's module, imported as train.py imports it)

from training_scripts.model_shapes import PRESETS  # noqa: E402
from trainstack.planning.memory import (  # noqa: E402
    Layout,
    Workload,
    activation_bytes,
    head_activation_bytes,
    layer_activation_bytes_per_token,
    matmul_parameter_count,
    model_activation_bytes,
    model_state_bytes,
)

# Estimated peak / measured peak must lie in this band (measured: 0.997 to 1.001).
PEAK_TOLERANCE = (0.95, 1.05)


@functools.cache
def _model(preset: str) -> torch.nn.Module:
    net = model.build_model(model.model_config(preset, None, None, 1))  # on the meta device, as train.py
    model.initialize(net, net, torch.device("cpu"), seed=0, allocate=True)  # built once per preset
    return net


def built(preset: str, checkpointing: bool = False) -> torch.nn.Module:
    """train.py's model, with gradients cleared and checkpointing on or off as train.py's flag sets it."""
    net = _model(preset)
    net.zero_grad(set_to_none=True)
    # transformers 5 renamed gradient_checkpointing_*; 4.44.2 (the image's) has only the old names.
    if checkpointing:
        if hasattr(net, "activation_checkpointing_enable"):
            net.activation_checkpointing_enable({"use_reentrant": False})
        else:
            net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    elif hasattr(net, "activation_checkpointing_disable"):
        net.activation_checkpointing_disable()
    else:
        net.gradient_checkpointing_disable()
    return net


def loss_of(net: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """train.py's Trainer.loss, on CPU."""
    logits = net(input_ids=batch[:, :-1]).logits
    return F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())


@pytest.mark.parametrize("preset", ["tiny", "125m"])
def test_parameter_gradient_and_adamw_bytes_are_exact(preset):
    net = built(preset)
    optimizer = torch.optim.AdamW(net.parameters())
    loss_of(net, torch.randint(0, 100, (1, 9))).backward()
    optimizer.step()
    weights, gradients, state = model_state_bytes(PRESETS[preset], Layout(world_size=1, shard_degree=1))
    assert weights == sum(p.nbytes for p in net.parameters())
    assert gradients == sum(p.grad.nbytes for p in net.parameters())
    # AdamW's moments; its step counters are host scalars, not GPU memory.
    assert state == sum(s["exp_avg"].nbytes + s["exp_avg_sq"].nbytes for s in optimizer.state.values())


def saved_bytes(net: torch.nn.Module, batch: torch.Tensor, autocast: bool) -> dict[str, int]:
    """Bytes of the distinct storages autograd keeps for backward, by the part that first saved them."""
    parameters = {p.untyped_storage().data_ptr() for p in net.parameters()}
    owner, saved = ["model"], {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters and storage.data_ptr() not in saved:
            saved[storage.data_ptr()] = (owner[0], storage.nbytes())
        return tensor

    hooks = [
        layer.register_forward_pre_hook(lambda *_, index=index: owner.__setitem__(0, f"layer{index}"))
        for index, layer in enumerate(net.model.layers)
    ]
    hooks.append(net.model.norm.register_forward_pre_hook(lambda *_: owner.__setitem__(0, "head")))
    try:
        with (
            torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor),
            torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast),
        ):
            loss_of(net, batch)
    finally:
        for hook in hooks:
            hook.remove()
    totals: dict[str, int] = {}
    for part, size in saved.values():
        totals[part] = totals.get(part, 0) + size
    return totals


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
@pytest.mark.parametrize(("preset", "batch", "seq_len"), [("tiny", 2, 64), ("125m", 2, 32)])
def test_saved_activations_per_layer_and_head_are_exact(preset, batch, seq_len, autocast):
    shape, tokens = PRESETS[preset], batch * seq_len
    net = built(preset)
    saved = saved_bytes(net, torch.randint(0, shape["vocab_size"], (batch, seq_len + 1)), autocast)
    # Under autocast the bf16 copy of each weight is saved too: the planner's bf16_weight_copies (DDP).
    layer_weights = (
        2 * matmul_parameter_count({**shape, "num_hidden_layers": 1, "vocab_size": 0}) if autocast else 0
    )
    head_weights = 2 * shape["vocab_size"] * shape["hidden_size"] if autocast else 0
    assert saved["layer1"] == layer_activation_bytes_per_token(shape, autocast) * tokens + layer_weights
    # The first layer also keeps what the whole model keeps once: token ids, rotary tables (and a few
    # bytes of scalars).
    once = saved["layer0"] + saved["model"] - saved["layer1"]
    assert once == pytest.approx(model_activation_bytes(shape, seq_len, tokens), abs=64)
    # The head's saved part: its working set less the two gradients of log-softmax's backward.
    temporaries = 2 * 4 * shape["vocab_size"] * tokens
    head = head_activation_bytes(shape, tokens, autocast, weight_gradient=False)
    assert saved["head"] == pytest.approx(head - temporaries + head_weights, abs=64)


def measured_peak(net: torch.nn.Module, batch: torch.Tensor) -> int:
    """Peak bytes of a forward/backward beyond parameters and (already allocated) gradients."""
    loss_of(net, batch).backward()  # gradients exist from here on, as with gradient accumulation
    net.zero_grad(set_to_none=False)
    tracker = MemTracker()
    tracker.track_external(net)
    with tracker:
        loss_of(net, batch).backward()
    peak = tracker.get_tracker_snapshot("peak")[torch.device("cpu")]
    kept = peak[_MemRefType.PARAM] + peak[_MemRefType.GRAD] + peak[_MemRefType.BUFFER]
    return peak["Total"] - kept


@pytest.mark.parametrize(
    ("preset", "batch", "seq_len", "checkpointing"),
    [("tiny", 2, 128, False), ("tiny", 2, 128, True), ("125m", 1, 64, False)],
)
def test_activation_estimate_matches_the_measured_peak(preset, batch, seq_len, checkpointing):
    shape = PRESETS[preset]
    net = built(preset, checkpointing)
    measured = measured_peak(net, torch.randint(0, shape["vocab_size"], (batch, seq_len + 1)))
    layers, head = activation_bytes(Workload(shape, seq_len, batch, checkpointing, autocast=False))
    ratio = (layers + head) / measured
    print(f"{preset} b={batch} s={seq_len} checkpointing={checkpointing}: estimate/measured {ratio:.3f}")
    assert PEAK_TOLERANCE[0] <= ratio <= PEAK_TOLERANCE[1]


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
def test_grouped_query_attention_keeps_k_and_v_as_the_images_transformers_repeats_them(autocast):
    """transformers 4.44.2 (the image's) copies K and V to every query head (`repeat_kv`) before SDPA,
    which keeps the copies: the planner counts that. Newer transformers pass grouped K/V to SDPA
    (`enable_gqa`) and keep them grouped: the count is then their upper bound by exactly those copies."""
    import transformers  # noqa: PLC0415

    shape = {**PRESETS["tiny"], "num_key_value_heads": 2}
    config = model.model_config("tiny", None, None, 1)
    config.num_key_value_heads = shape["num_key_value_heads"]
    net = model.build_model(config)
    model.initialize(net, net, torch.device("cpu"), seed=0, allocate=True)
    batch, seq_len = 2, 64
    tokens = batch * seq_len
    saved = saved_bytes(net, torch.randint(0, shape["vocab_size"], (batch, seq_len + 1)), autocast)
    layer_weights = (
        2 * matmul_parameter_count({**shape, "num_hidden_layers": 1, "vocab_size": 0}) if autocast else 0
    )
    counted = layer_activation_bytes_per_token(shape, autocast) * tokens + layer_weights
    key_value_copies = (
        2 * (2 if autocast else 4) * (shape["hidden_size"] // 2) * tokens
    )  # K and V, half the heads
    if transformers.__version__ == "4.44.2":
        assert saved["layer1"] == counted
    else:
        assert saved["layer1"] in (counted, counted - key_value_copies)
