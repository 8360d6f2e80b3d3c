"""The `migrations:` section and teams[].inherits_single_team_runs refuse what no deployment could have had,
in one sentence naming the field."""

from __future__ import annotations

import pytest

from tests.migrations.conftest import config_data, teams
from trainstack.config_loading import ConfigError, parse_settings


def refusal(data) -> str:
    with pytest.raises(ConfigError) as refused:
        parse_settings(data, {}, source="test config")
    return str(refused.value)


def test_a_kept_group_of_no_pipeline_of_the_config_is_refused():
    data = config_data("teams-queue")
    data["migrations"]["keep_model_package_groups"] = ["other-small-torchrun"]
    assert (
        "migrations.keep_model_package_groups: 'other-small-torchrun' is no group of this config's "
        "pipelines; name one starting with trainstack-research- or trainstack-search-"
    ) in refusal(data)


def test_only_one_team_inherits_the_single_team_runs():
    data = config_data("teams-queue")
    data["teams"] = [{**team, "inherits_single_team_runs": True} for team in teams(inherit=None)["teams"]]
    assert "teams: only one team may set inherits_single_team_runs; set by research, search" in refusal(data)


def test_the_trigger_table_is_not_kept_with_teams():
    data = config_data("teams-queue")
    data["migrations"]["keep_trigger_table"] = True
    assert "migrations.keep_trigger_table keeps the trigger table of a config without teams" in refusal(data)


def test_only_teams_of_the_config_keep_their_trigger_tables():
    data = config_data("teams-queue")
    data["migrations"]["keep_team_trigger_tables"] = ["nobody"]
    assert (
        "migrations.keep_team_trigger_tables: 'nobody' is not a team of this config; name one of research, "
        "search" in refusal(data)
    )
    data = config_data("single-queue")
    data["migrations"] = {"keep_team_trigger_tables": ["search"]}
    assert "keep_team_trigger_tables names teams and this config has none" in refusal(data)
