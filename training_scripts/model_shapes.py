"""Model shapes and the arithmetic on them, without torch: train.py and `trainstack plan` share it.

A shape is a mapping with the Llama-family keys of a Hugging Face config.json (`hidden_size`,
`intermediate_size`, `num_hidden_layers`, `num_attention_heads`, `num_key_value_heads`, `vocab_size`;
optional `head_dim`, `tie_word_embeddings`, `attention_bias`, `mlp_bias`), which is what train.py
builds: a preset below, or the config.json of `--init-from`.
"""

from collections.abc import Mapping

# Llama-style shapes. `tiny` is for CPU tests; the others follow published sizes
# (125m ~ GPT-3 small, 1b ~ TinyLlama 1.1B, 7b/13b/70b ~ Llama 2).
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
    "70b":  (8192,   28672, 80,    64,   8,  32000, 4096),
}.items()}
# fmt: on

# Dense bf16 peak FLOP/s per GPU, by the exact name the driver reports (torch.cuda.get_device_name(),
# nvidia-smi), with the part's name for the MFU line. NVIDIA's datasheets print bf16 with 2:4 sparsity,
# "1/2 lower without sparsity" (H100 datasheet): H100 SXM and H200 SXM 1,979 -> 989 TFLOPS, H100 PCIe
# 1,513 -> 756, H100 NVL and H200 NVL 1,671 -> 835; A100 (SXM4 and PCIe) 312 dense; L40S 362; L4 121;
# A10G 125 (A10's datasheet figure; AWS's A10G is assumed no faster). The same silicon in another form
# factor runs at other clocks and power, so matching a family name ("H100" in "NVIDIA H100 PCIe") would
# claim an SXM peak for a PCIe card: a name not listed gets no MFU rather than a wrong one. V100 has no
# bf16 tensor cores. Device names as nvidia-smi prints them (public nvidia-smi outputs and GPU type lists).
DEVICE_PEAK_BF16_FLOPS: dict[str, tuple[str, float]] = {
    "NVIDIA H200": ("H200 SXM", 989e12),
    "NVIDIA H200 NVL": ("H200 NVL", 835e12),
    "NVIDIA H100 80GB HBM3": ("H100 SXM", 989e12),
    "NVIDIA H100 PCIe": ("H100 PCIe", 756e12),
    "NVIDIA H100 NVL": ("H100 NVL", 835e12),
    "NVIDIA A100-SXM4-40GB": ("A100 SXM4", 312e12),
    "NVIDIA A100-SXM4-80GB": ("A100 SXM4", 312e12),
    "NVIDIA A100-PCIE-40GB": ("A100 PCIe", 312e12),
    "NVIDIA A100 80GB PCIe": ("A100 PCIe", 312e12),
    "NVIDIA A10G": ("A10G", 125e12),
    "NVIDIA L40S": ("L40S", 362e12),
    "NVIDIA L4": ("L4", 121e12),
}
# The GPU of each SageMaker instance family (trainstack.instances' gpu_model) is the SXM part where there
# are several: p5 (H100 80GB HBM3), p5e/p5en (H200), p4d/p4de (A100-SXM4); for the planner's throughput.
_INSTANCE_GPU_DEVICE = {
    "H200": "NVIDIA H200",
    "H100": "NVIDIA H100 80GB HBM3",
    "A100": "NVIDIA A100-SXM4-40GB",
    "A10G": "NVIDIA A10G",
    "L40S": "NVIDIA L40S",
}
PEAK_BF16_FLOPS = {model: DEVICE_PEAK_BF16_FLOPS[device][1] for model, device in _INSTANCE_GPU_DEVICE.items()}


def peak_bf16_flops(device_name: str) -> tuple[str, float] | None:
    """(part, dense bf16 peak FLOP/s) of the GPU named exactly `device_name`; None if it is not listed."""
    return DEVICE_PEAK_BF16_FLOPS.get(device_name.strip())


def head_dim(shape: Mapping) -> int:
    return shape.get("head_dim") or shape["hidden_size"] // shape["num_attention_heads"]


def key_value_heads(shape: Mapping) -> int:
    return shape.get("num_key_value_heads") or shape["num_attention_heads"]


def layer_parameter_count(shape: Mapping) -> int:
    """One decoder block: attention projections, SwiGLU MLP and its two RMSNorm weights."""
    hidden, mlp = shape["hidden_size"], shape["intermediate_size"]
    query_width = shape["num_attention_heads"] * head_dim(shape)
    key_value_width = key_value_heads(shape) * head_dim(shape)
    attention = hidden * (query_width + 2 * key_value_width) + query_width * hidden
    if shape.get("attention_bias"):
        attention += query_width + 2 * key_value_width + hidden
    feed_forward = 3 * hidden * mlp + (2 * mlp + hidden if shape.get("mlp_bias") else 0)
    return attention + feed_forward + 2 * hidden


def embedding_parameter_count(shape: Mapping) -> int:
    """The input token-embedding table: a lookup, no FLOPs."""
    return shape["vocab_size"] * shape["hidden_size"]


def parameter_count(shape: Mapping) -> int:
    """Every parameter of the model, as `sum(p.numel() for p in model.parameters())` counts them."""
    output_projection = 0 if shape.get("tie_word_embeddings") else shape["vocab_size"] * shape["hidden_size"]
    return (
        embedding_parameter_count(shape)
        + shape["num_hidden_layers"] * layer_parameter_count(shape)
        + shape["hidden_size"]  # final norm
        + output_projection
    )


def non_embedding_parameter_count(shape: Mapping) -> int:
    """The parameters that take part in matmuls: all but the input embedding (the output
    projection counts, tied or not, because it is a matmul over the vocabulary)."""
    output_projection = shape["vocab_size"] * shape["hidden_size"]
    return (
        shape["num_hidden_layers"] * layer_parameter_count(shape) + shape["hidden_size"] + output_projection
    )


def flops_per_token(shape: Mapping, seq_len: int) -> float:
    """Training FLOPs per token (PaLM, Chowdhery et al. 2022, appendix B): 6·N for the matmuls of
    forward and backward, with N the non-embedding parameters, plus 12·L·H·Q·T for attention
    (L layers, H heads of width Q, T the sequence length)."""
    attention = 12 * shape["num_hidden_layers"] * shape["num_attention_heads"] * head_dim(shape) * seq_len
    return 6 * non_embedding_parameter_count(shape) + attention
