"""A profile's cost cap (`max_cost_usd`): the run's planned cost, checked before it starts, and the
figures the pipeline stops it by once its billed cost crosses the cap (docs/pipeline.md, "Cost cap").

Planned cost: the planner's figure (trainstack.planning: the tokens of max_steps at the assumed MFU,
priced from trainstack.prices) for the run's max_steps and instance count, on the dearest of the
profile's instance preferences (SageMaker may run on any of them). A step costs the same whatever the
instance count (tokens per step and tokens per second both scale with it), so the plan is
usd_per_instance_step x max_steps x instances; tests hold it equal to the planner's own figure.
Overrides of other size hyperparameters (seq_len, micro_batch_size, ...) are not re-planned: the
billed-cost stop still bounds such a run. A profile the planner cannot plan (another entry point, a
GPU without an MFU figure) has no planned cost: only the billed-cost stop applies.

Billed cost (stacks/pipeline/cost_cap_states.py computes it in the machines): per attempt, billed seconds
x instance count x the on-demand price of the type SageMaker selected, summed over the run's attempts (in
queue mode an attempt's cost sums this over every training job AWS Batch started for it:
stacks/pipeline/attempt/batch_training_jobs.py). Billed seconds are DescribeTrainingJob's
BillableTimeInSeconds once SageMaker reports it (for managed spot it already holds the spot saving:
botocore's model gives the saving as 1 - BillableTimeInSeconds / TrainingTimeInSeconds), else
TrainingStartTime to TrainingEndTime, or to now while the job runs ("You are billed for the time interval
between this time and the value of TrainingEndTime", DescribeTrainingJob in botocore's sagemaker model).
On-demand list prices make the figure an upper bound for spot runs while they run; warm pools
(keep_alive_seconds) are not counted.

Evaluation (a profile with `registry:`): the evaluation job that follows a Completed run counts against
the same cap (docs/registry.md). Its planned cost (evaluation_cost_usd), added to the run's, is one
instance of the dearest preference for the planner's assumed image pull, the model's download (its
parameters in bf16, train.py's --export-dtype default, at the planner's assumed download rate) and
max_eval_tokens at one GPU's planned training throughput (6N FLOPs a token: more than the forward pass
alone needs, so an upper bound where evaluate.py runs on the GPU); all three figures are assumed, not
measured. Its billed cost is counted as an attempt's, and the billed-cost stop bounds whatever the plan
misses, retries included.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from training_scripts.model_shapes import parameter_count
from trainstack.planning.forecast import ASSUMED_IMAGE_PULL_SECONDS
from trainstack.planning.plans import plan
from trainstack.planning.setups import TRAIN_DEFAULTS, UnplannableError, setup_for_profile
from trainstack.planning.stores import NODE_BYTES_PER_SECOND
from trainstack.prices import TrainingPrices, offline_training_prices
from trainstack.profiles import Profile

MAX_STEPS = "max_steps"


@dataclass(frozen=True)
class StepRate:
    """What one training step costs on one instance of a preference (the planner's figure)."""

    instance_type: str
    instance_count: int
    usd_per_instance_step: float


def step_rates(profile: Profile, prices: TrainingPrices) -> list[StepRate]:
    """One rate per instance preference, or none when the planner has no cost for one of them."""
    try:
        setup = setup_for_profile(profile)
    except UnplannableError:
        return []
    rates = []
    for preference in profile.instance_preferences:
        spec = preference.spec
        if spec.gpus == 0:  # the planner models GPU training only: a CPU type has no planned step cost
            return []
        one_step = plan(setup, spec, 1, setup.tokens_per_step(spec, 1), prices=prices)
        cost = one_step.throughput and one_step.throughput.cost_usd
        if cost is None:
            return []
        rates.append(StepRate(spec.name, preference.instance_count, cost))
    return rates


# The model as train.py exports it, bf16 (training_scripts/flags.py, --export-dtype): bytes a parameter.
EXPORTED_BYTES_PER_PARAMETER = 2


def evaluation_cost_usd(profile: Profile, prices: TrainingPrices) -> float:
    """The planned cost of the evaluation job after a Completed run (module docstring): 0 without a
    `registry:` block or a plan for every preference."""
    if profile.registry is None or not step_rates(profile, prices):
        return 0.0
    setup = setup_for_profile(profile)
    download = parameter_count(setup.shape) * EXPORTED_BYTES_PER_PARAMETER / NODE_BYTES_PER_SECOND
    costs = []
    for preference in profile.instance_preferences:
        spec = preference.spec
        throughput = plan(setup, spec, 1, None).throughput
        one_gpu = throughput.tokens_per_second / spec.gpus
        seconds = ASSUMED_IMAGE_PULL_SECONDS + download + profile.registry.max_eval_tokens / one_gpu
        costs.append(seconds / 3600 * prices.hourly_usd(spec.name))
    return max(costs)


def profile_steps(profile: Profile) -> int:
    """The profile's max_steps (as the planner reads it: trainstack.planning.setups.profile_token_budget)."""
    return int(profile.hyperparameters.get(MAX_STEPS, TRAIN_DEFAULTS[MAX_STEPS]))


def run_steps(profile: Profile, hyperparameters: Mapping[str, str]) -> int:
    """The run's max_steps: its own (the input check holds it to plain digits, which train.py reads as
    written: trainstack.hyperparameter_reading), else the profile's."""
    given = hyperparameters.get(MAX_STEPS)
    return profile_steps(profile) if given is None else int(given)


def planned_cost_usd(
    profile: Profile, hyperparameters: Mapping[str, str], instance_count: int | None, prices: TrainingPrices
) -> float | None:
    """The run's planned cost on its dearest preference, its evaluation job's included; None when the
    planner has no figure."""
    rates = step_rates(profile, prices)
    if not rates:
        return None
    steps = run_steps(profile, hyperparameters)
    training = max(
        rate.usd_per_instance_step * steps * (instance_count or rate.instance_count) for rate in rates
    )
    return training + evaluation_cost_usd(profile, prices)


def usd(amount: float) -> str:
    """Dollars as every cost-cap message prints them, rounded as the state machines' JSONata 2.0.6
    `$formatNumber(n, '#,##0.00')` rounds: half to even on the number's shortest decimal form (302.245 is
    $302.24 there, where Python's own format rounds the binary value up to $302.25)."""
    cents = Decimal(repr(float(amount))).quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN)
    return f"${cents:,.2f}"


def cost_cap_problem(
    profile: Profile, hyperparameters: Mapping[str, str], instance_count: int | None, prices: TrainingPrices
) -> str | None:
    """The input check's sentence when the run's planned cost exceeds the profile's max_cost_usd."""
    if profile.max_cost_usd is None:
        return None
    planned = planned_cost_usd(profile, hyperparameters, instance_count, prices)
    if planned is None or planned <= profile.max_cost_usd:
        return None
    return over_cap_message(planned, profile.name, profile.max_cost_usd)


def over_cap_message(planned: float, profile_name: str, cap: float) -> str:
    return (
        f"The run's planned cost of {usd(planned)} exceeds the max_cost_usd of {usd(cap)} of profile "
        f"{profile_name}; lower max_steps or instanceCount, or raise max_cost_usd."
    )


def check_cost_caps(settings: Any) -> Any:
    """Settings' after-validator: no cap below a profile's planned cost, which would refuse every run of it at
    the input check, and no cap on a type without a price in the config's region (one sentence naming the
    field and the figures)."""
    prices = offline_training_prices(settings.region)
    for index, profile in enumerate(settings.profiles):
        unpriced = [
            preference.instance_type
            for preference in profile.instance_preferences
            if prices.hourly_usd(preference.instance_type) is None
        ]
        if profile.max_cost_usd is not None and unpriced:
            raise ValueError(
                f"profiles.{index}.max_cost_usd needs a price for every instance type and "
                f"trainstack/prices.py has none for {', '.join(unpriced)} in {settings.region}; use priced "
                f"types ({', '.join(prices.entries) or 'none in this region'}) or remove max_cost_usd"
            )
        planned = planned_cost_usd(profile, {}, None, prices)
        if planned is not None and profile.max_cost_usd is not None and planned > profile.max_cost_usd:
            cap = usd(profile.max_cost_usd)
            raise ValueError(
                f"profiles.{index}.max_cost_usd: {cap} is below the {usd(planned)} that a run of profile "
                f"{profile.name} is planned to cost (its max_steps on the dearest instance preference), so "
                f"every run would be refused; raise it to at least {usd(planned)} or lower max_steps"
            )
    for index, team in enumerate(settings.teams):
        for profile in (settings.profile(name) for name in team.profiles):
            planned = planned_cost_usd(profile, {}, None, prices)
            if planned is not None and planned > team.max_cost_usd:
                cap = usd(team.max_cost_usd)
                raise ValueError(
                    f"teams.{index}.max_cost_usd: {cap} is below the {usd(planned)} that a run of profile "
                    f"{profile.name} is planned to cost, so team {team.name} could never run it; raise it to "
                    f"at least {usd(planned)} or remove {profile.name} from the team's profiles"
                )
    return settings
