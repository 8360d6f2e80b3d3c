"""Tokens per second, time and cost of a token budget, from FLOPs at an assumed MFU.

tokens/s per GPU = MFU x peak bf16 FLOP/s / training FLOPs per token, with FLOPs per token from
training_scripts.model_shapes.flops_per_token (the formula train.py logs MFU with: 6 x non-embedding
parameters + PaLM's attention term). MFU counts model FLOPs only, so activation checkpointing, which
recomputes the forward pass (2 of the 6 N), costs a factor 6/8 in tokens/s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date

from training_scripts.model_shapes import PEAK_BF16_FLOPS, flops_per_token
from trainstack.instances import InstanceType
from trainstack.prices import TrainingPrices

# Assumed model FLOPs utilization per GPU model for train.py (FSDP/SMP, bf16, SDPA), as of the date below.
# References, all in model FLOPs (the work of one forward and backward pass, recomputation not counted):
# PaLM 540B 46.2 % on TPU v4, Megatron-Turing NLG 530B 29.7 % on A100, GPT-3 21.3 % (PaLM paper,
# Chowdhery et al. 2022, table 3); Megatron-LM (Narayanan et al. 2021) reports 52 % of A100 peak counting
# the recomputed forward pass (their FLOPs formula has 4 passes, not 3): 52 % x 3/4 = 39 % in model FLOPs;
# Llama 3 405B 38-43 % on H100 (Dubey et al. 2024, table 4). train.py fuses nothing beyond SDPA and
# compiles layers only on request, so the figures sit below those; small models (125m) reach less.
# Measure and replace these.
MFU_AS_OF = date(2026, 12, 1)
ASSUMED_MFU = {"H100": 0.35, "H200": 0.35, "A100": 0.35, "A10G": 0.30, "L40S": 0.30, "L4": 0.30}
RECOMPUTE_FACTOR = 6 / 8


@dataclass(frozen=True)
class Throughput:
    tokens_per_second: float  # whole job
    mfu: float
    hours: float | None  # for the token budget
    cost_usd: float | None  # None: no price recorded for the instance type
    usd_per_hour: float | None = None  # the whole job's on-demand price per hour; None: unpriced


def estimate_throughput(
    shape: Mapping,
    seq_len: int,
    spec: InstanceType,
    instance_count: int,
    activation_checkpointing: bool,
    tokens: float | None,
    prices: TrainingPrices | None = None,
) -> Throughput | None:
    """None for a GPU with no recorded peak FLOP/s or MFU (V100 has no bf16; CPU types have no GPU). No
    cost without `prices`, or for a type they do not price."""
    peak = PEAK_BF16_FLOPS.get(spec.gpu_model or "")
    mfu = ASSUMED_MFU.get(spec.gpu_model or "")
    if peak is None or mfu is None:
        return None
    efficiency = RECOMPUTE_FACTOR if activation_checkpointing else 1.0
    per_gpu = mfu * efficiency * peak / flops_per_token(shape, seq_len)
    tokens_per_second = per_gpu * spec.gpus * instance_count
    hours = tokens / tokens_per_second / 3600 if tokens else None
    price = prices and prices.hourly_usd(spec.name)
    per_hour = price * instance_count if price is not None else None
    cost = hours * per_hour if hours is not None and per_hour is not None else None
    return Throughput(tokens_per_second, mfu * efficiency, hours, cost, per_hour)
