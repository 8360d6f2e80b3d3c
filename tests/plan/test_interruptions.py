"""Interruptions besides failures (trainstack/planning/interruptions.py): stops, queue preemption, spot
reclaims, a training plan's end, capacity losses and deploys, at assumed rates the profile can change; the
bound on the time without a durable checkpoint; and what a stop costs where a SIGTERM save does not fit."""

from __future__ import annotations

import json

import pytest

from tests.conftest import DEFAULT_CONFIG
from trainstack.cli import main as trainstack
from trainstack.config_loading import ConfigError
from trainstack.planning.auto_interval import auto_interval, profile_forecasts

PLAN = ["plan", "--config", str(DEFAULT_CONFIG), "--profile"]


def test_the_shipped_7b_profile_checkpoints_at_least_hourly_and_says_what_a_stop_costs(capsys):
    """Issue 49: it solved its interval from failures alone, every 21,118 steps (8.5 h) for an 8-hour run,
    so a stop, preemption or spot reclaim restarted it from step 0."""
    assert trainstack([*PLAN, "llama-7b-smp", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    for plan, row in zip(document["plans"], document["goodput"]["preferences"], strict=True):
        durable_gap = row["checkpoint_interval_seconds"] + row["save_blocking_seconds"]
        assert durable_gap + row["save_durable_after_seconds"] <= 3600
        assert row["checkpoint_interval_bounded"] and row["max_hours_without_checkpoint"] == 1
        assert set(row["interruptions_losing_work"]) == {"stop", "queue_preemption", "capacity_loss"}
        assert row["hours_between_lossy_events"] < row["job_mtbf_hours"] / 40
        stop = row["stop_cost"]
        assert 0.5 < stop["hours_average"] < stop["hours_most"] < 1.2
        hourly = plan["cost_usd"] / plan["hours"]
        assert stop["usd_most"] == pytest.approx(stop["hours_most"] * hourly, rel=0.01)
    assert trainstack([*PLAN, "llama-7b-smp"]) == 0
    out = capsys.readouterr().out
    assert (
        "interruptions per job (fault_model.interruption_hours, defaults assumed): stop every 168 h, queue "
        "preemption every 168 h, capacity loss every 720 h" in out
    )
    assert "bounded by fault_model.max_hours_without_checkpoint 1 h" in out
    assert (
        "SIGTERM save does not fit: a stop, preemption or reclaim costs 0.60 h of the job on average" in out
    )


def test_the_bound_is_the_profiles_and_auto_and_the_pipeline_keep_it(make_settings):
    settings = make_settings({"fault_model": {"max_hours_without_checkpoint": 0.25}})
    profile = settings.profile("llama-7b-smp")
    steps = auto_interval(profile)
    for item in profile_forecasts(profile):
        assert steps * item.costs.step + item.costs.save_blocking + item.costs.durable_after <= 0.25 * 3600
    assert steps < auto_interval(make_settings().profile("llama-7b-smp"))


def test_a_sigterm_save_that_fits_keeps_the_work_and_spot_counts_only_on_spot(capsys):
    assert trainstack([*PLAN, "llama-1b-smddp", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["goodput"]["preferences"][0]
    assert row["interruptions_losing_work"] == ["capacity_loss"] and row["stop_cost"] is None
    assert "spot" not in row["interruptions_per_hour"]
    assert trainstack([*PLAN, "small-torchrun", "--json"]) == 0  # managed_spot: true
    row = json.loads(capsys.readouterr().out)["goodput"]["preferences"][0]
    assert row["interruptions_per_hour"]["spot"] == pytest.approx(1 / 24, rel=1e-3)


def test_rates_can_be_changed_or_turned_off_and_bad_ones_get_one_sentence(make_settings):
    quiet = {"stop": None, "queue_preemption": None, "capacity_loss": None}
    settings = make_settings(
        {"fault_model": {"interruption_hours": quiet, "max_hours_without_checkpoint": 24}}
    )
    first = profile_forecasts(settings.profile("llama-7b-smp"))[0]
    assert first.exposure.interruptions == {} and not first.bounded
    assert first.goodput.interval_steps == 21_118  # failures alone: the old figure
    with pytest.raises(ConfigError) as error:
        make_settings({"fault_model": {"interruption_hours": {"stop": -1}}})
    assert "fault_model.interruption_hours.stop: " in str(error.value) and "\n" not in str(error.value)
    assert "positive number of hours" in str(error.value)


def test_auto_keeps_the_bound_on_every_preference_the_job_may_land_on(make_settings, capsys):
    """The request names one interval whatever type SageMaker picks: on the slower p4de fallback the first
    preference's 2,419 steps would take 3.1 h."""
    profile = make_settings().profile("llama-7b-smp")
    steps = auto_interval(profile)
    for item in profile_forecasts(profile):
        costs = item.costs
        assert steps * costs.step + costs.save_blocking + costs.durable_after <= 3600, item.plan.spec.name
    assert trainstack([*PLAN, "llama-7b-smp", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["goodput"]["auto_interval_steps"] == steps
