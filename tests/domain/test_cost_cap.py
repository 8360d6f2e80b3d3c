"""The cost cap's figures (trainstack.cost_cap): the planned cost is the planner's own, and the config
refuses a cap it could not price."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import default_config_data
from trainstack.cli import main as trainstack
from trainstack.config_loading import ConfigError
from trainstack.cost_cap import planned_cost_usd, usd
from trainstack.planning.setups import plan_profile
from trainstack.prices import offline_training_prices

PRICES = offline_training_prices("us-east-1")  # config/default.yaml's region


@pytest.mark.parametrize(("hyperparameters", "count"), [({}, None), ({"max_steps": "1234"}, 8)])
def test_the_planned_cost_is_the_planners_figure_on_the_dearest_preference(settings, hyperparameters, count):
    profile = settings.profile("llama-1b-smddp")
    update = {"hyperparameters": {**profile.hyperparameters, **hyperparameters}}
    if count:
        update["instance_preferences"] = [
            preference.model_copy(update={"instance_count": count})
            for preference in profile.instance_preferences
        ]
    planner = max(
        plan.throughput.cost_usd for plan in plan_profile(profile.model_copy(update=update), None, PRICES)
    )
    assert planned_cost_usd(profile, hyperparameters, count, PRICES) == pytest.approx(planner, rel=1e-12)


def test_a_cap_on_an_unpriced_instance_type_is_refused_in_one_sentence(make_settings):
    profiles = default_config_data()["profiles"]
    capped = profiles[
        0
    ]  # llama-7b-smp: smp runs on ml.p5e.48xlarge, which trainstack/prices.py does not price
    capped["instance_preferences"] = [{"instance_type": "ml.p5e.48xlarge", "instance_count": 2}]
    capped["max_cost_usd"] = 100_000
    with pytest.raises(
        ConfigError,
        match=r"max_cost_usd needs a price for every instance type .*ml\.p5e\.48xlarge in us-east-1",
    ):
        make_settings({"profiles": profiles})


def test_a_cap_below_the_profiles_planned_cost_is_refused_naming_both_figures(
    make_settings, capsys, tmp_path
):
    """Issue 49: `max_cost_usd: 500` on llama-7b-smp passed check-config and synth, and then every run of the
    profile was refused at `trainstack start`."""
    profiles = default_config_data()["profiles"]
    profiles[0]["max_cost_usd"] = 500
    with pytest.raises(ConfigError) as error:
        make_settings({"profiles": profiles})
    planned = planned_cost_usd(make_settings().profile("llama-7b-smp"), {}, None, PRICES)
    message = str(error.value)
    assert (
        f"profiles.0.max_cost_usd: $500.00 is below the {usd(planned)} that a run of profile llama-7b-smp"
        in message
    )
    assert "\n" not in message and message.count(". ") == 0
    path = tmp_path / "capped.yaml"
    path.write_text(yaml.safe_dump({**default_config_data(), "profiles": profiles}))
    assert trainstack(["check-config", str(path)]) == 1
    assert "$500.00 is below the" in capsys.readouterr().err
    profiles[0]["max_cost_usd"] = round(planned + 0.01, 2)  # at the plan: accepted
    make_settings({"profiles": profiles})


def test_a_team_cap_below_a_planned_run_of_its_profiles_is_refused(make_settings):
    team = {
        "name": "research",
        "profiles": ["llama-7b-smp"],
        "principals": ["arn:aws:iam::111111111111:role/ml-research"],
        "max_instances": 4,
        "max_runtime_hours": 72,
        "max_cost_usd": 100,
    }
    with pytest.raises(
        ConfigError,
        match=r"teams\.0\.max_cost_usd: \$100\.00 is below the \$[0-9,.]+ that a run of "
        r"profile llama-7b-smp is planned to cost, so team research could never run it",
    ):
        make_settings({"teams": [team]})


def test_a_cap_in_a_region_without_prices_is_refused_never_priced_as_us_east_1(make_settings):
    """Before: every region was priced with us-east-1's figures."""
    with pytest.raises(ConfigError) as error:
        make_settings({"region": "eu-west-1", "availability_zone": "eu-west-1b"})
    assert (
        "profiles.1.max_cost_usd needs a price for every instance type and trainstack/prices.py has none for "
        "ml.p4d.24xlarge, ml.p4de.24xlarge in eu-west-1; use priced types (none in this region)"
    ) in str(error.value)
