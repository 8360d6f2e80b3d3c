"""Llama-family causal LM built from a preset or a local directory; nothing is downloaded."""

from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

# Llama-style shapes. `tiny` is for CPU tests; the others follow published sizes
# (125m ~ GPT-3 small, 1b ~ TinyLlama 1.1B, 7b/13b ~ Llama 2).
# fmt: off
_PRESET_FIELDS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "vocab_size", "max_position_embeddings")
PRESETS: dict[str, dict] = {name: dict(zip(_PRESET_FIELDS, shape, strict=True)) for name, shape in {
    #        hidden  mlp    layers heads kv  vocab  context
    "tiny": (64,     176,   2,     4,    4,  512,   512),
    "125m": (768,    2048,  12,    12,   12, 32000, 2048),
    "1b":   (2048,   5632,  22,    32,   4,  32000, 2048),
    "7b":   (4096,   11008, 32,    32,   32, 32000, 4096),
    "13b":  (5120,   13824, 40,    40,   40, 32000, 4096),
}.items()}
# fmt: on


def build_model(preset: str, init_from: str | None, vocab_size: int | None) -> torch.nn.Module:
    """A fresh model from `preset`, or the config (and weights, if present) in `init_from`."""
    if init_from:
        directory = Path(init_from)
        config = AutoConfig.from_pretrained(directory, local_files_only=True)
        if any(directory.glob("*.safetensors")) or any(directory.glob("*.bin")):
            # Train in fp32 master weights whatever dtype the checkpoint was saved in.
            return AutoModelForCausalLM.from_pretrained(directory, local_files_only=True).float()
        return AutoModelForCausalLM.from_config(config)
    shape = dict(PRESETS[preset])
    if vocab_size:
        shape["vocab_size"] = vocab_size
    config = LlamaConfig(
        **shape,
        tie_word_embeddings=False,
        rms_norm_eps=1e-5,
        use_cache=False,
        architectures=["LlamaForCausalLM"],
    )  # so the saved config.json names its class
    return LlamaForCausalLM(config)


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated transformer blocks: the unit for FSDP sharding, compile and checkpointing."""
    return list(model.model.layers)


def flops_per_token(model: torch.nn.Module, seq_len: int) -> float:
    """Training FLOPs per token: 6N for the matmuls plus attention (PaLM appendix B)."""
    config = model.config
    n_params = sum(p.numel() for p in model.parameters())
    head_dim = config.hidden_size // config.num_attention_heads
    attention = 12 * config.num_hidden_layers * config.num_attention_heads * head_dim * seq_len
    return 6 * n_params + attention
