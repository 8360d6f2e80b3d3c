"""`trainstack plan`'s text report and recommendations: what the plans say, line by line (the command and
its inputs: trainstack/commands/plan.py)."""

from __future__ import annotations

from trainstack.planning.memory import GIB
from trainstack.planning.plans import Plan, Setup
from trainstack.planning.throughput import MFU_AS_OF
from trainstack.prices import TrainingPrices


def report(
    setup: Setup, plans: list[Plan], recommended: list[Plan | None], budget: str, prices: TrainingPrices
) -> str:
    lines = [
        f"model {setup.model}: seq_len {setup.seq_len}, micro_batch_size {setup.micro_batch_size}, "
        f"activation checkpointing {'on' if setup.activation_checkpointing else 'off'}, "
        f"strategy {strategy(setup)}; time and cost for {budget}"
    ]
    for index, item in enumerate(plans):
        spec = item.spec
        lines.append("")
        lines.append(
            f"{spec.name} x{item.instance_count} ({item.instance_count * spec.gpus} x {spec.gpu_model}):"
        )
        lines.append(f"  {item.line().split(': ', 1)[1]}")
        parts = ", ".join(
            f"{name.replace('_', ' ')} {value / GIB:.1f}" for name, value in item.memory.parts().items()
        )
        lines.append(f"  per GPU (GiB): {parts}")
        if item.fix:
            fixed = f" ({item.fixed_memory.total / GIB:.1f} GiB)" if item.fixed_memory else ""
            lines.append(f"  smallest change that fits: {item.fix}{fixed}")
        if item.throughput is None:
            lines.append(f"  no throughput: no peak FLOP/s or MFU recorded for {spec.gpu_model}")
        elif item.throughput.cost_usd is None and item.throughput.hours is not None:
            lines.append(f"  no cost: no price recorded for {spec.name} in {prices.region}")
        lines.append(f"  {item.checkpoint.line()}")
        if recommended:
            best = recommended[index]
            lines.append(f"  recommended: {recommendation_text(best)}")
    lines.append("")
    lines.append(
        f"Assumed MFU per GPU model as of {MFU_AS_OF}; "
        f"{prices.sentence(item.spec.name for item in plans)}. See docs/plan.md."
    )
    return "\n".join(lines)


def strategy(setup: Setup) -> str:
    if setup.strategy == "smp":
        return f"smp (hybrid_shard_degree {setup.hybrid_shard_degree or 'all'})"
    return f"{setup.strategy} ({setup.parallelism})"


def recommendation(item: Plan) -> dict:
    return {
        "instance_type": item.spec.name,
        "hybrid_shard_degree": item.setup.hybrid_shard_degree,
        "activation_checkpointing": item.setup.activation_checkpointing,
        "micro_batch_size": item.setup.micro_batch_size,
        "memory_per_gpu_gib": round(item.memory.total / GIB, 3),
        "tokens_per_second": item.throughput and round(item.throughput.tokens_per_second),
    }


def recommendation_text(item: Plan | None) -> str:
    if item is None:
        return "nothing fits on this type at this count, even with micro_batch_size 1"
    return (
        f"smp.hybrid_shard_degree {item.setup.hybrid_shard_degree}, activation_checkpointing "
        f"{str(item.setup.activation_checkpointing).lower()}, "
        f"micro_batch_size {item.setup.micro_batch_size}: {item.line().split(': ', 1)[1]}"
    )
