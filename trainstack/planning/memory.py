"""GPU memory per rank of a train.py job: model state, activations, working buffers, allowance.

What train.py does, and so what is counted (docs/plan.md derives every term):
- fp32 master weights, fp32 gradients and AdamW's two fp32 moments: 4 + 4 + 8 bytes per parameter,
  divided by the ranks a parameter is sharded over (FSDP2 / SMP's FSDP). Gradients stay sharded through
  gradient accumulation: FSDP reduce-scatters every micro-batch (distributed.gradient_sync); DDP's are
  full-size anyway. SMP tensor parallelism is refused (trainstack/profiles.py): nothing is divided by it;
- on GPU under DDP, bf16 autocast: every matmul weight is cast to bf16 per forward, and that copy
  lives until the backward pass has used it, whole (not sharded): 2 bytes per matmul parameter. FSDP2
  (torchrun/smddp) instead gathers bf16 layers by its mixed-precision policy and reduce-scatters fp32
  gradients; SMP's FSDP1 gathers bf16 and reduce-scatters bf16 gradients by AWS's MixedPrecision
  (training_scripts/smp.py): no whole-model copy, the gathered layers are their working buffers;
- activations: Korthikanti et al. 2022 counted per layer for train.py's Llama (fp32 residual stream
  and RMSNorm, bf16 matmul inputs, SwiGLU, SDPA flash/memory-efficient attention that keeps no
  s x s scores; grouped-query K/V as transformers 4.44.2, the image's, computes it: `repeat_kv` copies
  K and V to every query head before SDPA, which keeps the copies), plus the loss over the vocabulary
  in fp32; under the FSDP bf16 policies the same count, an upper bound (bf16 residual stream, matmul
  inputs kept once);
- working buffers: FSDP's gathered layers, or DDP's gradient buckets (a second copy of the gradients);
- an allowance: CUDA context, cuBLAS/NCCL workspaces and caching-allocator fragmentation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from training_scripts.model_shapes import (
    head_dim,
    layer_parameter_count,
    non_embedding_parameter_count,
    parameter_count,
)

GIB = 1024**3
# CUDA context, cuBLAS workspaces and NCCL buffers of one rank, measured as a few hundred MiB to ~1.5 GiB
# on A100/H100 with NCCL; 2 GiB is the stated, conservative figure.
CUDA_CONTEXT_BYTES = 2 * GIB
# PyTorch's caching allocator keeps freed blocks for reuse; what it cannot reuse is fragmentation.
FRAGMENTATION = 0.10

FP32 = 4
BF16 = 2
WEIGHT_BYTES = FP32  # master weights
GRADIENT_BYTES = FP32
OPTIMIZER_BYTES = 2 * FP32  # AdamW exp_avg and exp_avg_sq (its step counters live on the host)


@dataclass(frozen=True)
class Layout:
    """How a job spreads the model over its GPUs."""

    world_size: int
    shard_degree: int  # ranks one parameter is sharded over (FSDP/SMP); 1: replicated (DDP)
    ddp: bool = False  # DDP keeps gradient buckets: a second, flat copy of the gradients
    # FSDP2 and SMP's FSDP1: their policies gather bf16 layers on GPU, so autocast makes no weight copies
    bf16_gather: bool = False
    # SMP's FSDP1 (reduce_dtype bf16) reduce-scatters the bf16 gradient itself; FSDP2 an fp32 copy of it
    bf16_reduce: bool = False


@dataclass(frozen=True)
class Workload:
    """What each rank computes per micro-batch."""

    shape: Mapping
    seq_len: int
    micro_batch_size: int
    activation_checkpointing: bool
    autocast: bool = True  # bf16 autocast on GPU; False: fp32 throughout, as train.py runs on CPU

    @property
    def tokens(self) -> int:
        return self.seq_len * self.micro_batch_size


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per GPU by part; `total` adds fragmentation and the CUDA context."""

    weights: int
    gradients: int
    optimizer: int
    bf16_weight_copies: int
    activations: int
    loss: int
    working_buffers: int

    @property
    def tensors(self) -> int:
        return sum(self.parts_without_allowance().values())

    @property
    def allowance(self) -> int:
        return CUDA_CONTEXT_BYTES + round(FRAGMENTATION * self.tensors)

    @property
    def total(self) -> int:
        return self.tensors + self.allowance

    def parts_without_allowance(self) -> dict[str, int]:
        # Not dataclasses.asdict: it deep-copies, and synth sums these for 512 instance counts per profile.
        return {field.name: getattr(self, field.name) for field in fields(self)}

    def parts(self) -> dict[str, int]:
        return {**self.parts_without_allowance(), "allowance": self.allowance}


def model_state_bytes(shape: Mapping, layout: Layout) -> tuple[int, int, int]:
    """(weights, gradients, AdamW state) bytes per rank, as FSDP divides them."""
    per_rank = _ceil_div(parameter_count(shape), layout.shard_degree)
    return WEIGHT_BYTES * per_rank, GRADIENT_BYTES * per_rank, OPTIMIZER_BYTES * per_rank


def layer_activation_bytes_per_token(shape: Mapping, autocast: bool) -> float:
    """Bytes one decoder layer keeps for backward, per token (train.py's Llama; see docs/plan.md).

    The residual stream and RMSNorm run in fp32 (the weights are fp32, autocast leaves them alone).
    Under autocast each matmul casts its input to bf16 and keeps its own copy; in fp32 the matmuls
    sharing an input keep it once. SDPA keeps K and V as transformers 4.44.2's `repeat_kv` hands them
    over, expanded to every query head (newer transformers pass grouped K/V with `enable_gqa` and keep
    less: the count is their upper bound).
    """
    hidden, mlp = shape["hidden_size"], shape["intermediate_size"]
    query = shape["num_attention_heads"] * head_dim(shape)
    matmul = BF16 if autocast else FP32

    def matmul_inputs(consumers: int) -> int:
        return consumers * matmul * hidden if autocast else FP32 * hidden

    rms_norm = 2 * FP32 * hidden + FP32  # its input, the normalized value, 1/rms
    attention = (
        matmul_inputs(3)  # q, k, v projections
        + matmul * 3 * query  # rotated q, and k and v repeated to every query head, kept by SDPA
        + matmul * query  # SDPA output, laid out as the output projection's input (no copy)
        + FP32 * shape["num_attention_heads"]  # SDPA's log-sum-exp (no s x s scores)
    )
    feed_forward = matmul_inputs(2) + 4 * matmul * mlp  # gate/up inputs; gate, SiLU(gate), up, down input
    return 2 * rms_norm + attention + feed_forward


def head_activation_bytes(shape: Mapping, tokens: int, autocast: bool, weight_gradient: bool) -> int:
    """Peak of the final norm, the output projection and the fp32 cross-entropy over the vocabulary,
    measured on CPU (docs/plan.md): during log-softmax's backward its saved output, the gradient
    coming in and the gradient going out (three fp32 vocabulary-sized vectors per token); during the
    output projection's backward one such vector plus that weight's fresh fp32 gradient, unless the
    weight is FSDP-sharded and its gradient is a working buffer (`weight_gradient` False)."""
    hidden, vocab = shape["hidden_size"], shape["vocab_size"]
    target = 8  # int64, kept by the loss
    norm_and_input = 2 * FP32 * hidden + FP32 + (BF16 if autocast else FP32) * hidden + target
    loss_backward = (norm_and_input + 3 * FP32 * vocab) * tokens
    projection_backward = (norm_and_input + FP32 * vocab) * tokens
    if weight_gradient:
        projection_backward += GRADIENT_BYTES * vocab * hidden
    return max(loss_backward, projection_backward)


def model_activation_bytes(shape: Mapping, seq_len: int, tokens: int) -> int:
    """Kept once per micro-batch, whatever the layers: the token ids (int64) for the embedding's
    backward and the rotary cos/sin tables (fp32, one row per position)."""
    return 8 * tokens + 2 * FP32 * head_dim(shape) * seq_len


def activation_bytes(workload: Workload, weight_gradient: bool = True) -> tuple[int, int]:
    """(decoder-layer activations, model-level and loss-head activations) bytes per rank at their peak.

    Without checkpointing the peak is the start of backward: every layer's saved tensors plus the loss
    head's working set. With activation checkpointing each layer keeps only its fp32 input, and the
    peak is the larger of the loss head's working set and one layer recomputed in full.
    """
    shape, tokens = workload.shape, workload.tokens
    layer = layer_activation_bytes_per_token(shape, workload.autocast)
    head = head_activation_bytes(shape, tokens, workload.autocast, weight_gradient)
    layers = shape["num_hidden_layers"]
    model = model_activation_bytes(shape, workload.seq_len, tokens)
    if not workload.activation_checkpointing:
        return round(layers * layer * tokens), model + head
    inputs = layers * FP32 * shape["hidden_size"] * tokens
    recomputed = round(layer * tokens)
    if recomputed > head:
        return inputs + recomputed, model
    return inputs, model + head


def estimate_memory(workload: Workload, layout: Layout) -> MemoryEstimate:
    shape = workload.shape
    weights, gradients, optimizer = model_state_bytes(shape, layout)
    autocast_copies = workload.autocast and not layout.bf16_gather
    bf16_copies = BF16 * matmul_parameter_count(shape) if autocast_copies else 0
    activations, loss = activation_bytes(workload, weight_gradient=layout.shard_degree == 1)
    return MemoryEstimate(
        weights=weights,
        gradients=gradients,
        optimizer=optimizer,
        bf16_weight_copies=bf16_copies,
        activations=activations,
        loss=loss,
        working_buffers=_working_buffers(shape, layout, workload.autocast),
    )


def _working_buffers(shape: Mapping, layout: Layout, bf16: bool) -> int:
    """DDP: flat gradient buckets as large as the gradients. FSDP: the gathered parameters of the
    unsharded root (embedding, output projection, final norm), of the layer running and of the one
    prefetched, and the unsharded gradients of the layer being reduced. Both bf16 policies gather bf16
    (even on one rank); FSDP2 reduces its bf16 gradients in an fp32 copy, SMP's FSDP1 in bf16."""
    if layout.ddp:
        return GRADIENT_BYTES * parameter_count(shape)
    bf16_gather = layout.bf16_gather and bf16
    if layout.shard_degree == 1 and not bf16_gather:
        return 0
    root = parameter_count(shape) - shape["num_hidden_layers"] * layer_parameter_count(shape)
    layer = layer_parameter_count(shape)
    weight, gradient = (BF16, BF16 if layout.bf16_reduce else BF16 + FP32) if bf16_gather else (FP32, FP32)
    return weight * (root + 2 * layer) + gradient * max(root, layer)


def matmul_parameter_count(shape: Mapping) -> int:
    """Parameters autocast casts to bf16: every weight but the embedding table and the RMSNorm scales."""
    norms = (2 * shape["num_hidden_layers"] + 1) * shape["hidden_size"]
    return non_embedding_parameter_count(shape) - norms


def _ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)
