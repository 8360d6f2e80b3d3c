"""Every parameter and buffer gets its initial value from our code, whatever transformers does.

transformers 4.44.2 (the image's) initializes only Linear and Embedding: RMSNorm weights would keep
whatever memory held. Fresh memory is filled with NaN here, so anything left unset shows.
"""

from __future__ import annotations

import pytest
import torch
from model import build_model, delayed_initializer, initialize, model_config

CPU = torch.device("cpu")


@pytest.fixture
def nan_memory(monkeypatch):
    """torch.empty and torch.empty_like (what Module.to_empty allocates with) return NaN, not zeros."""
    empty, empty_like = torch.empty, torch.empty_like

    def poisoned(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.device.type != "meta":
            tensor.fill_(float("nan") if tensor.is_floating_point() else torch.iinfo(tensor.dtype).max)
        return tensor

    monkeypatch.setattr(torch, "empty", lambda *args, **kwargs: poisoned(empty(*args, **kwargs)))
    monkeypatch.setattr(torch, "empty_like", lambda *args, **kwargs: poisoned(empty_like(*args, **kwargs)))


def tiny_model() -> torch.nn.Module:
    return build_model(model_config("tiny", None, None, 32))


def assert_initialized(model: torch.nn.Module) -> None:
    tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    assert tensors, "no tensors"
    for name, tensor in tensors.items():
        assert tensor.device == CPU, name
        assert bool(torch.isfinite(tensor).all()), f"{name} is not finite"
    norms = [name for name in tensors if name.endswith("norm.weight")]
    assert len(norms) == 2 * model.config.num_hidden_layers + 1, norms
    for name in norms:
        assert bool((tensors[name] == 1).all()), f"{name} is not 1"
    # The rotary frequencies of the config: 1 / base^(2i/d) (transformers 5: base in rope_parameters).
    config = model.config
    base = getattr(config, "rope_theta", None) or config.rope_parameters["rope_theta"]
    head_dim = config.hidden_size // config.num_attention_heads
    expected = 1.0 / base ** (torch.arange(0, head_dim, 2).float() / head_dim)
    rotary = [name for name in tensors if name.endswith("inv_freq")]
    assert rotary
    for name in rotary:
        torch.testing.assert_close(tensors[name], expected)
    for name, tensor in tensors.items():
        if name.endswith("proj.weight") or name.endswith("embed_tokens.weight"):
            assert 0.5 < tensor.std().item() / model.config.initializer_range < 1.5, name


@pytest.mark.image_stack
@pytest.mark.newer_stack
def test_the_meta_device_path_sets_every_tensor(nan_memory):
    model = tiny_model()
    initialize(model, model, CPU, seed=3, allocate=True)
    assert_initialized(model)


@pytest.mark.image_stack
@pytest.mark.newer_stack
def test_smps_delayed_initialization_hook_sets_every_tensor_as_the_meta_device_path_does(nan_memory):
    """FSDP1 under SMP calls the hook once per module whose own tensors are still on the meta device, in
    its own order (unit by unit): each module's values come from its name, so the order does not matter."""
    model, reference = tiny_model(), tiny_model()
    hook = delayed_initializer(model, CPU, seed=3)
    for module in reversed(list(model.modules())):
        hook(module)
    assert_initialized(model)
    initialize(reference, reference, CPU, seed=3, allocate=True)
    for (name, tensor), (_, expected) in zip(
        model.state_dict().items(), reference.state_dict().items(), strict=True
    ):
        assert torch.equal(tensor, expected), name
