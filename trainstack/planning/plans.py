"""A plan for one instance preference: memory per GPU against the GPU's, the smallest change that makes
it fit, tokens/s, time and cost; and the SMP degrees to recommend for a model and instance."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

from training_scripts.model_shapes import parameter_count
from trainstack.instances import InstanceType
from trainstack.planning.checkpoints import ASSUMED_WRITE_BYTES_PER_SECOND, CheckpointPlan, plan_checkpoint
from trainstack.planning.memory import GIB, Layout, MemoryEstimate, Workload, estimate_memory
from trainstack.planning.throughput import Throughput, estimate_throughput
from trainstack.prices import TrainingPrices


@dataclass(frozen=True)
class Setup:
    """What train.py runs with, whatever the instance: model, batch shape and parallel strategy."""

    model: str  # a preset name or a config.json path, for messages
    shape: Mapping
    seq_len: int
    micro_batch_size: int
    grad_accum: int
    activation_checkpointing: bool
    strategy: str  # smp, smddp, torchrun
    parallelism: str  # fsdp or ddp (outside SMP)
    hybrid_shard_degree: int = 0  # SMP only; 0: shard over every data-parallel rank
    keep_checkpoints: int = 2  # complete checkpoints kept (and downloaded by every node on a restart)

    def layout(self, spec: InstanceType, instance_count: int) -> Layout:
        world = spec.gpus * instance_count
        if self.strategy == "smp":
            shard = min(self.hybrid_shard_degree or world, world)
            return Layout(world, shard, bf16_gather=True, bf16_reduce=True)  # AWS's MixedPrecision (smp.py)
        if self.parallelism == "ddp":
            return Layout(world, 1, ddp=True)
        return Layout(world, world, bf16_gather=True)

    def workload(self) -> Workload:
        return Workload(self.shape, self.seq_len, self.micro_batch_size, self.activation_checkpointing)

    def tokens_per_step(self, spec: InstanceType, instance_count: int) -> int:
        return self.seq_len * self.micro_batch_size * self.grad_accum * spec.gpus * instance_count


@dataclass(frozen=True)
class Plan:
    setup: Setup
    spec: InstanceType
    instance_count: int
    memory: MemoryEstimate
    throughput: Throughput | None
    fix: str | None  # the smallest change that makes it fit, when it does not
    fixed_memory: MemoryEstimate | None
    checkpoint: CheckpointPlan
    tokens: float | None = None  # the budget that hours and cost are for

    @property
    def gpu_memory(self) -> int:
        return self.spec.gpu_memory_bytes

    @property
    def fits(self) -> bool:
        return self.memory.total <= self.gpu_memory

    @property
    def shortfall(self) -> int:
        return max(self.memory.total - self.gpu_memory, 0)

    def line(self) -> str:
        """One line: type x count, memory per GPU, fit, tokens/s, time and cost."""
        text = (
            f"{self.spec.name} x{self.instance_count}: {gib(self.memory.total)} of "
            f"{self.spec.gpu_memory_gib:.1f} GiB per GPU, "
        )
        text += "fits" if self.fits else f"does NOT fit (short {gib(self.shortfall)} GiB)"
        if self.throughput:
            text += f"; {self.throughput.tokens_per_second:,.0f} tokens/s"
            if self.throughput.hours is not None:
                text += f", {self.throughput.hours:,.1f} h"
            if self.throughput.cost_usd is not None:
                text += f", ${self.throughput.cost_usd:,.0f}"
        return text

    def as_dict(self) -> dict:
        layout = self.setup.layout(self.spec, self.instance_count)
        return {
            "instance_type": self.spec.name,
            "instance_count": self.instance_count,
            "gpu_memory_gib": round(self.spec.gpu_memory_gib, 3),
            "memory_per_gpu_gib": {name: round(value / GIB, 3) for name, value in self.memory.parts().items()}
            | {"total": round(self.memory.total / GIB, 3)},
            "fits": self.fits,
            "shortfall_gib": round(self.shortfall / GIB, 3),
            "fix": self.fix,
            "tokens": self.tokens,
            "layout": {
                "world_size": layout.world_size,
                "shard_degree": layout.shard_degree,
                "ddp": layout.ddp,
                "bf16_gather": layout.bf16_gather,
                "bf16_reduce": layout.bf16_reduce,
            },
            "tokens_per_second": self.throughput and round(self.throughput.tokens_per_second),
            "assumed_mfu": self.throughput and round(self.throughput.mfu, 3),
            "hours": self.throughput and self.throughput.hours and round(self.throughput.hours, 2),
            "cost_usd": self.throughput and self.throughput.cost_usd and round(self.throughput.cost_usd, 2),
            "checkpoint": self.checkpoint.as_dict(),
        }


def gib(value: int) -> str:
    return f"{value / GIB:.1f}"


def fits(setup: Setup, spec: InstanceType, instance_count: int) -> bool:
    """Whether the model fits in each GPU's memory (the memory estimate alone, no throughput)."""
    return _memory(setup, spec, instance_count).total <= spec.gpu_memory_bytes


def plan(
    setup: Setup,
    spec: InstanceType,
    instance_count: int,
    tokens: float | None,
    checkpoint_write_rate: float = ASSUMED_WRITE_BYTES_PER_SECOND,
    prices: TrainingPrices | None = None,
) -> Plan:
    """The plan on `instance_count` x `spec`; its cost from `prices` (none without them)."""
    memory = _memory(setup, spec, instance_count)
    fix, fixed = None, None
    if memory.total > spec.gpu_memory_bytes:
        found = smallest_fix(setup, spec, instance_count)
        fix, fixed = found if found else (_NO_FIX, None)
    throughput = _throughput(setup, spec, instance_count, tokens, prices)
    step_seconds = (
        setup.tokens_per_step(spec, instance_count) / throughput.tokens_per_second if throughput else None
    )
    checkpoint = plan_checkpoint(
        parameter_count(setup.shape),
        instance_count,
        setup.strategy,
        setup.keep_checkpoints,
        step_seconds,
        checkpoint_write_rate,
    )
    return Plan(setup, spec, instance_count, memory, throughput, fix, fixed, checkpoint, tokens)


_NO_FIX = (
    "no change of this strategy makes it fit (not even sharding over every GPU, activation checkpointing "
    "and micro_batch_size 1 together): use more instances or a type with more GPU memory"
)


def smallest_fix(setup: Setup, spec: InstanceType, instance_count: int) -> tuple[str, MemoryEstimate] | None:
    """The first change, cheapest in throughput first, after which the model fits; None if none does."""
    limit = spec.gpu_memory_bytes
    for description, changed in _changes(setup, spec, instance_count):
        memory = _memory(changed, spec, instance_count)
        if memory.total <= limit:
            return description, memory
    return None


def _changes(setup: Setup, spec: InstanceType, instance_count: int) -> Iterator[tuple[str, Setup]]:
    layout = setup.layout(spec, instance_count)
    if setup.strategy == "smp":
        for degree in _divisors(layout.world_size):
            if degree > layout.shard_degree:
                yield (
                    f"shard wider: smp.hybrid_shard_degree {degree}",
                    replace(setup, hybrid_shard_degree=degree),
                )
    elif setup.parallelism == "ddp":
        yield "shard: hyperparameter parallelism fsdp", replace(setup, parallelism="fsdp")
    if not setup.activation_checkpointing:
        yield (
            "checkpoint activations: hyperparameter activation_checkpointing true",
            replace(setup, activation_checkpointing=True),
        )
    for size in range(setup.micro_batch_size - 1, 0, -1):
        yield (
            f"smaller micro-batch: micro_batch_size {size} (raise grad_accum to keep the global batch)",
            replace(setup, micro_batch_size=size),
        )
    widest = replace(
        setup,
        hybrid_shard_degree=0,
        parallelism="fsdp",
        activation_checkpointing=True,
        micro_batch_size=1,
    )
    yield "shard over every GPU, checkpoint activations and micro_batch_size 1 together", widest


def recommend(
    setup: Setup,
    spec: InstanceType,
    instance_count: int,
    tokens: float | None,
    prices: TrainingPrices | None = None,
) -> Plan | None:
    """SMP sharding and activation checkpointing for this model on this instance: of the layouts that
    fit, the fastest, then the one sharded over the fewest GPUs (sharding within a node keeps
    all-gathers off the network). The micro-batch shrinks only when nothing fits at its size. Never
    tensor parallelism: train.py does not support it yet (trainstack/profiles.py refuses it)."""
    world = spec.gpus * instance_count
    for micro_batch in range(setup.micro_batch_size, 0, -1):
        candidates = []
        for shard in _divisors(world):
            for checkpointing in (False, True):
                candidate = replace(
                    setup,
                    strategy="smp",
                    micro_batch_size=micro_batch,
                    hybrid_shard_degree=shard,
                    activation_checkpointing=checkpointing,
                )
                if _memory(candidate, spec, instance_count).total > spec.gpu_memory_bytes:
                    continue
                throughput = _throughput(candidate, spec, instance_count, tokens)
                speed = throughput.tokens_per_second if throughput else 0.0
                candidates.append((-round(speed), shard, candidate))
        if candidates:
            best = min(candidates, key=lambda item: item[:2])[2]
            return plan(best, spec, instance_count, tokens, prices=prices)
    return None


def _memory(setup: Setup, spec: InstanceType, instance_count: int) -> MemoryEstimate:
    return estimate_memory(setup.workload(), setup.layout(spec, instance_count))


def _throughput(
    setup: Setup,
    spec: InstanceType,
    instance_count: int,
    tokens: float | None,
    prices: TrainingPrices | None = None,
):
    return estimate_throughput(
        setup.shape,
        setup.seq_len,
        spec,
        instance_count,
        setup.activation_checkpointing,
        tokens,
        prices,
    )


def _divisors(number: int) -> list[int]:
    return [value for value in range(1, number + 1) if number % value == 0]
