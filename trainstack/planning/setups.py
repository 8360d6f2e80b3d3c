"""What train.py will run, read from a profile (its strategy, SMP degrees and hyperparameters) or from
explicit values, without torch: the planner's input."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from itertools import chain
from pathlib import Path

from training_scripts.model_shapes import PRESETS
from trainstack.planning.plans import Plan, Setup, fits, plan
from trainstack.prices import TrainingPrices
from trainstack.profiles import Profile

# train.py's defaults for the flags the planner reads (a test holds them equal to train.py's parser).
TRAIN_DEFAULTS = {
    "model_preset": "125m",
    "seq_len": 1024,
    "micro_batch_size": 8,
    "grad_accum": 1,
    "max_steps": 1000,
    "activation_checkpointing": False,
    "parallelism": "fsdp",
    "keep_checkpoints": 2,
}
_TRUE = ("true", "1", "yes")
# The hyperparameters that fix the tokens of a step (with the instances' GPUs), and what each counts.
STEP_SHAPE = {"seq_len": "tokens", "micro_batch_size": "sequences", "grad_accum": "micro-batches"}


class UnplannableError(ValueError):
    """The model cannot be known before the job runs; str() is one sentence."""


def shape_from_config_json(directory: str | Path) -> dict:
    """The shape in a Hugging Face config.json (as train.py's --init-from reads it)."""
    path = Path(directory) / "config.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise UnplannableError(
            f"--init-from {directory}: cannot read a config.json there ({error})"
        ) from None


def preset_shape(preset: str, vocab_size: int | None = None) -> dict:
    shape = dict(PRESETS[preset])
    if vocab_size:
        shape["vocab_size"] = vocab_size
    return shape


def setup_for_profile(profile: Profile) -> Setup:
    """The Setup of a train.py profile; UnplannableError for other entry points or an --init-from model
    (its config.json exists only inside the job)."""
    if profile.entry_point != "train.py":
        raise UnplannableError(f"profile {profile.name} runs {profile.entry_point}, not train.py")
    hyperparameters = {key.replace("-", "_"): value for key, value in profile.hyperparameters.items()}
    if "init_from" in hyperparameters:
        raise UnplannableError(
            f"profile {profile.name} starts from --init-from, whose config.json is in the job"
        )

    def value(name: str):
        return hyperparameters.get(name, TRAIN_DEFAULTS.get(name))

    preset = value("model_preset")
    if preset not in PRESETS:
        raise UnplannableError(
            f"profile {profile.name}: model_preset {preset!r} is not one of {', '.join(PRESETS)}"
        )
    try:
        vocab_size = int(hyperparameters["vocab_size"]) if "vocab_size" in hyperparameters else None
        seq_len, micro_batch, grad_accum, keep_checkpoints = (
            int(value(name)) for name in ("seq_len", "micro_batch_size", "grad_accum", "keep_checkpoints")
        )
    except ValueError:
        raise UnplannableError(f"profile {profile.name}: a size hyperparameter is not an integer") from None
    smp = profile.smp
    return Setup(
        model=preset,
        shape=preset_shape(preset, vocab_size),
        seq_len=seq_len,
        micro_batch_size=micro_batch,
        grad_accum=grad_accum,
        # SMP's sm_activation_offloading is not counted: the config check and train.py refuse it.
        activation_checkpointing=str(value("activation_checkpointing")).lower() in _TRUE,
        strategy=profile.strategy,
        parallelism=value("parallelism"),
        hybrid_shard_degree=(smp and smp.hybrid_shard_degree) or 0,
        keep_checkpoints=keep_checkpoints,
    )


def forecast_setup(preset: str) -> Setup:
    """The presets as docs/plan.md's forecast tables and benchmarks/goodput_sim.py run them: seq 4096,
    micro-batch 1, activation checkpointing, FSDP (keep_checkpoints 2, train.py's default)."""
    return Setup(
        model=preset,
        shape=preset_shape(preset),
        seq_len=4096,
        micro_batch_size=1,
        grad_accum=1,
        activation_checkpointing=True,
        strategy="torchrun",
        parallelism="fsdp",
    )


def profile_token_budget(profile: Profile, setup: Setup, instance_count: int, spec) -> int:
    """Tokens the profile trains: max_steps x the global batch in tokens on that preference."""
    steps = int(profile.hyperparameters.get("max_steps", TRAIN_DEFAULTS["max_steps"]))
    return steps * setup.tokens_per_step(spec, instance_count)


def plan_profile(
    profile: Profile, tokens: float | None = None, prices: TrainingPrices | None = None
) -> list[Plan]:
    """One plan per instance preference (GPU types only); tokens default to the profile's max_steps; costs
    from `prices` (none without them)."""
    setup = setup_for_profile(profile)
    plans = []
    for preference in profile.instance_preferences:
        spec = preference.spec
        if spec.gpus == 0:
            continue
        budget = tokens or profile_token_budget(profile, setup, preference.instance_count, spec)
        plans.append(plan(setup, spec, preference.instance_count, budget, prices=prices))
    return plans


def fit_problems(profile: Profile) -> Iterator[str]:
    """One sentence per preferred instance type the profile's model cannot fit on (config validation).
    Memory alone decides; the full plan (throughput, smallest fix) is made only for a type that does not
    fit, since synth checks every instance count from 1 to 512 of every profile."""
    try:
        setup = setup_for_profile(profile)
    except UnplannableError:
        return
    for index, preference in enumerate(profile.instance_preferences):
        spec, count = preference.spec, preference.instance_count
        if spec.gpus == 0 or fits(setup, spec, count):
            continue
        result = plan(setup, spec, count, tokens=None)
        yield (
            f"profile {profile.name} cannot fit model {result.setup.model} on instance_preferences.{index} "
            f"({spec.name}): it needs {result.memory.total / 2**30:.1f} GiB per GPU and the GPU has "
            f"{spec.gpu_memory_gib:.1f} GiB (short {result.shortfall / 2**30:.1f} GiB); "
            f"smallest change that fits: {result.fix}"
        )


def instance_count_problem(profile: Profile, count: int) -> str | None:
    """Why `profile` cannot run with every preference at `count` instances (1 to 512), or None when it can.
    Only placement and fit depend on the count, and the rest held when the profile was validated:
    re-checking just those keeps the pipeline's table of valid counts (512 per profile) cheap to build."""
    candidate = profile.with_instance_count(count)
    return next(chain(candidate.placement_problems(), fit_problems(candidate)), None)


def plan_lines(
    profile: Profile,
    hyperparameters: Mapping[str, str] | None = None,
    instance_count: int | None = None,
    prices: TrainingPrices | None = None,
) -> list[str]:
    """`trainstack start`'s plan lines for the run it starts: the profile with the run's overrides, priced
    from `prices`."""
    update: dict = {}
    if hyperparameters:
        update["hyperparameters"] = {**profile.hyperparameters, **hyperparameters}
    if instance_count:
        update["instance_preferences"] = [
            preference.model_copy(update={"instance_count": instance_count})
            for preference in profile.instance_preferences
        ]
    try:
        plans = plan_profile(profile.model_copy(update=update), prices=prices)
    except UnplannableError as error:
        return [f"plan: none ({error})"]
    return [f"plan: {result.line()}" for result in plans]


def as_mapping(setup: Setup) -> Mapping:
    return {
        "model": setup.model,
        "seq_len": setup.seq_len,
        "micro_batch_size": setup.micro_batch_size,
        "grad_accum": setup.grad_accum,
        "activation_checkpointing": setup.activation_checkpointing,
        "strategy": setup.strategy,
        "parallelism": setup.parallelism,
        "hybrid_shard_degree": setup.hybrid_shard_degree,
        "keep_checkpoints": setup.keep_checkpoints,
    }
