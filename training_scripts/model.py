"""Llama-family causal LM built from a preset or a local directory; nothing is downloaded."""

from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

# Llama-style shapes. `tiny` is for CPU tests; the others follow published sizes
# (125m ~ GPT-3 small, 1b ~ TinyLlama 1.1B, 7b/13b ~ Llama 2).
PRESETS: dict[str, dict] = {
    "tiny": dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=4, vocab_size=512, max_position_embeddings=512),
    "125m": dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
                 num_key_value_heads=12, vocab_size=32000, max_position_embeddings=2048),
    "1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
               num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048),
    "7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=32, vocab_size=32000, max_position_embeddings=4096),
    "13b": dict(hidden_size=5120, intermediate_size=13824, num_hidden_layers=40, num_attention_heads=40,
                num_key_value_heads=40, vocab_size=32000, max_position_embeddings=4096),
}


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
    config = LlamaConfig(**shape, tie_word_embeddings=False, rms_norm_eps=1e-5, use_cache=False,
                         architectures=["LlamaForCausalLM"])  # so the saved config.json names its class
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
