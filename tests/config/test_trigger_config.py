"""retrain_on_new_data: off by default; each mistake is one sentence naming the field and what is allowed."""

from __future__ import annotations

import pytest

from tests.config.test_config import error_for

TRIGGER = {"profile": "small-torchrun", "prefix": "datasets/corpus/"}


def test_the_trigger_is_off_by_default(make_settings):
    assert make_settings().retrain_on_new_data is None


def test_a_valid_section_gets_the_defaults(make_settings):
    trigger = make_settings({"retrain_on_new_data": TRIGGER}).retrain_on_new_data
    assert (trigger.quiet_minutes, trigger.max_delay_hours, trigger.fsx_import_timeout_minutes) == (15, 6, 60)
    assert trigger.failed_window_retries == 1


@pytest.mark.parametrize(
    ("section", "words"),
    [
        ({"prefix": "datasets/corpus/"}, "retrain_on_new_data.profile: Field required"),
        ({**TRIGGER, "profile": "nope"}, "retrain_on_new_data.profile must name a profile of the config"),
        ({**TRIGGER, "prefix": "other/"}, "must be a folder under dataset.prefix 'datasets/'"),
        ({**TRIGGER, "prefix": "datasets/"}, "not 'datasets/'"),
        ({**TRIGGER, "prefix": "datasets/fsx-import-reports/x/"}, "where FSx writes its import reports"),
        ({**TRIGGER, "prefix": "datasets/a b/"}, "an S3 key prefix of folders ending in /"),
        # URL encoders escape these (the key in an event may be encoded): the prefix would never match.
        ({**TRIGGER, "prefix": "datasets/it's(1)!/"}, "made of letters, digits, '.', '_' and '-'"),
        ({**TRIGGER, "quiet_minutes": 0}, "retrain_on_new_data.quiet_minutes"),
        ({**TRIGGER, "quiet_minutes": 120, "max_delay_hours": 1}, "quiet_minutes (120) must not exceed"),
        ({**TRIGGER, "max_delay_hours": 0}, "retrain_on_new_data.max_delay_hours"),
        ({**TRIGGER, "fsx_import_timeout_minutes": 1}, "retrain_on_new_data.fsx_import_timeout_minutes"),
        ({**TRIGGER, "debounce": 3}, "retrain_on_new_data.debounce"),
        ({**TRIGGER, "failed_window_retries": 6}, "retrain_on_new_data.failed_window_retries"),
    ],
)
def test_mistakes_are_one_sentence_naming_the_field(section, words):
    message = error_for({"retrain_on_new_data": section})
    assert words in message
    assert "\n" not in message


def test_trainstack_triggers_without_the_section_says_so_in_one_line(capsys):
    from tests.conftest import DEFAULT_CONFIG
    from trainstack.cli import main

    assert main(["triggers", "--config", str(DEFAULT_CONFIG)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("trainstack triggers: --config: ") and "sets no retrain_on_new_data" in error
    assert error.count("\n") == 1


TEAM = {
    "name": "research",
    "profiles": ["small-torchrun"],
    "principals": ["arn:aws:iam::111111111111:role/ml-research"],
    "max_instances": 4,
    "max_runtime_hours": 72,
    "max_cost_usd": 2_500,
}


def test_a_team_watches_its_own_dataset_prefix_or_a_folder_under_it(make_settings):
    for prefix in ("datasets/research/", "datasets/research/corpus/"):
        team = {**TEAM, "retrain_on_new_data": {"profile": "small-torchrun", "prefix": prefix}}
        [settings_team] = make_settings({"teams": [team]}).teams
        assert settings_team.retrain_on_new_data.prefix == prefix


@pytest.mark.parametrize(
    ("section", "words"),
    [
        (
            {"profile": "llama-7b-smp", "prefix": "datasets/research/"},
            "teams.0 (research).retrain_on_new_data.profile must name the team's profiles (small-torchrun), "
            "not 'llama-7b-smp'",
        ),
        (
            {"profile": "small-torchrun", "prefix": "datasets/search/"},
            "teams.0 (research).retrain_on_new_data.prefix must be the team's dataset prefix "
            "'datasets/research/' or a folder under it",
        ),
        (
            {"profile": "small-torchrun", "prefix": "datasets/"},
            "teams.0 (research).retrain_on_new_data.prefix must be the team's dataset prefix",
        ),
        ({"profile": "small-torchrun", "prefix": "datasets/research/", "quiet_minutes": 0}, "quiet_minutes"),
    ],
)
def test_a_teams_trigger_mistake_is_one_sentence_naming_the_team(section, words):
    message = error_for({"teams": [{**TEAM, "retrain_on_new_data": section}]})
    assert words in message


def test_with_teams_the_top_level_trigger_is_refused_in_favour_of_each_teams_own():
    message = error_for({"retrain_on_new_data": TRIGGER, "teams": [TEAM]})
    assert "retrain_on_new_data: with teams, each team sets its own in its entry" in message


def test_trainstack_triggers_of_a_team_without_a_trigger_says_so_in_one_line(capsys, tmp_path):
    import yaml

    from tests.conftest import TEAMS_CONFIG
    from trainstack.cli import main

    data = yaml.safe_load(TEAMS_CONFIG.read_text())
    del data["teams"][1]["retrain_on_new_data"]  # search's
    config = tmp_path / "teams.yaml"
    config.write_text(yaml.safe_dump(data))
    assert main(["triggers", "--config", str(config), "--team", "search"]) == 2
    error = capsys.readouterr().err
    assert "--config: team search sets no retrain_on_new_data, so no trigger is deployed" in error
    assert error.count("\n") == 1
