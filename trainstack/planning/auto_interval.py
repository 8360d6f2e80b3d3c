"""`checkpoint_interval: auto` in a profile's hyperparameters: the interval in steps that maximizes the
expected goodput of the profile's first instance preference (planning/forecast.py), resolved when the
request is built (trainstack.job_request.base_request), so the synthesized request carries a number.

The first preference is the one SageMaker launches on when it has capacity; a run that lands on another
type, or overrides instanceCount, keeps this interval (`trainstack plan` shows each preference's own), so it
is capped by every preference's bound (fault_model.max_hours_without_checkpoint): on a slower fallback type
the same steps take longer. After an attempt the pipeline re-solves it for the type the job got
(stacks/pipeline/checkpoint_interval.py).
"""

from __future__ import annotations

from typing import Any

from trainstack.planning.forecast import (
    AUTO,
    INTERVAL_HYPERPARAMETER,
    Forecast,
    asynchronous_saves,
    forecast,
    profile_store,
    run_faults,
)
from trainstack.planning.setups import UnplannableError, plan_profile
from trainstack.profiles import Profile


class AutoIntervalError(ValueError):
    """`auto` cannot be resolved for the profile; str() is one sentence."""


def is_auto(profile: Profile) -> bool:
    return profile.hyperparameters.get(INTERVAL_HYPERPARAMETER) == AUTO


def profile_forecasts(profile: Profile) -> list[Forecast | None]:
    """One forecast per GPU instance preference (None where the GPU has no throughput on record)."""
    asynchronous = asynchronous_saves(profile.hyperparameters)
    store = profile_store(profile)
    faults = run_faults(profile)
    return [forecast(item, faults, asynchronous, store) for item in plan_profile(profile)]


def auto_interval(profile: Profile) -> int:
    why = "trainstack cannot estimate its step and save times"
    try:
        forecasts = profile_forecasts(profile)
    except UnplannableError as error:
        raise AutoIntervalError(f"{_field(profile)} auto needs the step and save times: {error}") from None
    if not forecasts or forecasts[0] is None:
        raise AutoIntervalError(
            f"{_field(profile)} auto needs the step and save times, and {why} on "
            f"{profile.instance_preferences[0].instance_type} (no GPU throughput on record); "
            "give a whole number of steps"
        )
    return min([forecasts[0].goodput.interval_steps, *(item.most_steps for item in forecasts if item)])


def resolved_hyperparameters(profile: Profile) -> dict[str, str]:
    """The profile's hyperparameters with `checkpoint_interval: auto` replaced by its number of steps."""
    if not is_auto(profile):
        return dict(profile.hyperparameters)
    return {**profile.hyperparameters, INTERVAL_HYPERPARAMETER: str(auto_interval(profile))}


def check_auto_intervals(settings: Any) -> Any:
    """Settings' after-validator: every `auto` can be resolved (one sentence naming the field if not)."""
    for index, profile in enumerate(settings.profiles):
        if is_auto(profile):
            try:
                auto_interval(profile)
            except AutoIntervalError as error:
                raise ValueError(f"profiles.{index}.{error}") from None
    return settings


def _field(profile: Profile) -> str:
    return f"hyperparameters.{INTERVAL_HYPERPARAMETER} of profile {profile.name}:"
