"""Llama-family causal LM built from a preset or a local directory; nothing is downloaded."""

from pathlib import Path

import torch
from model_shapes import PRESETS
from model_shapes import flops_per_token as shape_flops_per_token
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM


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
    """Training FLOPs per token of `model`: model_shapes.flops_per_token on its config."""
    return shape_flops_per_token(model.config.to_dict(), seq_len)
