"""The cost cap's figures (trainstack.cost_cap): the planned cost is the planner's own, and the config
refuses a cap it could not price."""

from __future__ import annotations

import pytest

from tests.conftest import default_config_data
from trainstack.config_loading import ConfigError
from trainstack.cost_cap import planned_cost_usd
from trainstack.planning.setups import plan_profile


@pytest.mark.parametrize(("hyperparameters", "count"), [({}, None), ({"max_steps": "1234"}, 8)])
def test_the_planned_cost_is_the_planners_figure_on_the_dearest_preference(settings, hyperparameters, count):
    profile = settings.profile("llama-1b-smddp")
    update = {"hyperparameters": {**profile.hyperparameters, **hyperparameters}}
    if count:
        update["instance_preferences"] = [
            preference.model_copy(update={"instance_count": count})
            for preference in profile.instance_preferences
        ]
    planner = max(plan.throughput.cost_usd for plan in plan_profile(profile.model_copy(update=update)))
    assert planned_cost_usd(profile, hyperparameters, count) == pytest.approx(planner, rel=1e-12)


def test_a_cap_on_an_unpriced_instance_type_is_refused_in_one_sentence(make_settings):
    profiles = default_config_data()["profiles"]
    capped = next(profile for profile in profiles if profile.get("max_cost_usd"))
    capped["instance_preferences"] = [{"instance_type": "ml.p5e.48xlarge", "instance_count": 2}]
    with pytest.raises(
        ConfigError, match=r"max_cost_usd needs a price for every instance type .*ml\.p5e\.48xlarge"
    ):
        make_settings({"profiles": profiles})
