"""The `teams:` section: each team's namespace, profiles, caps and share, and the one-sentence errors."""

from __future__ import annotations

import pytest

from tests.conftest import TEAMS_CONFIG
from tests.queue.test_queue_config import config_error, settings_with
from trainstack.config_loading import load_settings
from trainstack.pipeline_runs import all_pipeline_runs, runs_for, shared_queue
from trainstack.team_budgets import budget_summary
from trainstack.teams import RunLimits

TEAM = {
    "name": "research",
    "profiles": ["llama-7b-smp", "llama-1b-smddp"],
    "principals": ["arn:aws:iam::111111111111:role/ml-research"],
    "max_instances": 4,
    "max_runtime_hours": 72,
    "max_cost_usd": 2_500,
}


def test_a_config_without_teams_is_one_pipeline_named_as_before():
    [runs] = all_pipeline_runs(settings_with({}))
    assert (runs.project, runs.team, runs.limits) == ("trainstack", None, RunLimits())
    assert [profile.name for profile in runs.profiles] == [
        "llama-7b-smp",
        "llama-1b-smddp",
        "nccl-test",
        "small-torchrun",
    ]


def test_a_team_runs_its_profiles_in_its_namespace_under_its_caps_and_share():
    settings = settings_with({"queue": {"enabled": True}, "teams": [TEAM]})
    runs = runs_for(settings, "research")
    assert (runs.project, runs.team) == ("trainstack-research", "research")
    assert runs.limits == RunLimits(max_instance_count=4, max_runtime_hours=72, max_priority=0)
    # The team's cap applies to a profile without one, and the lower of the two otherwise ($300 in the file).
    assert {profile.name: profile.max_cost_usd for profile in runs.profiles} == {
        "llama-7b-smp": 2_500,
        "llama-1b-smddp": 300,
    }
    assert runs.queue.shares == {"research": 1}
    assert shared_queue(settings).shares == {"research": 1}


def test_the_example_has_two_teams_sharing_the_queue_by_weight():
    settings = load_settings(str(TEAMS_CONFIG))
    assert [runs.project for runs in all_pipeline_runs(settings)] == [
        "trainstack-research",
        "trainstack-search",
    ]
    assert shared_queue(settings).shares == {"research": 2, "search": 1}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"name": "ml-a"},
            "teams.0.name: 'ml-a' is not 1 to 12 lowercase letters or digits starting with a letter",
        ),
        ({"profiles": ["gpt-5"]}, "teams.0 (research).profiles: 'gpt-5' is not a profile; use one of"),
        ({"principals": []}, "give principals (IAM role or user ARNs) or principal_tag"),
        (
            {"max_instances": 1},
            "profile llama-7b-smp asks for 2 instances, more than the team's max_instances (1)",
        ),
        (
            {"max_runtime_hours": 24},
            "profile llama-7b-smp runs up to 72 hours, more than the team's max_runtime_hours",
        ),
        # Budgets across runs (trainstack/team_budgets.py).
        (
            {"budget": {"on_budget": "wait"}},
            "budget: give max_concurrent_runs, max_instances_in_use or monthly_usd",
        ),
        ({"budget": {"max_concurrent_runs": 0}}, "teams.0.budget.max_concurrent_runs"),
        (
            {"budget": {"max_concurrent_runs": 2, "on_budget": "queue"}},
            "teams.0.budget.on_budget",
        ),
        (
            {"budget": {"monthly_usd": 1_000}},
            "teams.0 (research).budget.monthly_usd (1000) is below the team's per-run max_cost_usd (2500): "
            "one run could plan more than the month's budget",
        ),
        (
            {"budget": {"max_instances_in_use": 1}},
            "teams.0 (research).budget.max_instances_in_use (1) is below the 2 instances of profile "
            "llama-7b-smp: its runs could never start",
        ),
    ],
)
def test_a_bad_team_fails_in_one_sentence_naming_the_field(change, message):
    error = config_error({"teams": [{**TEAM, **change}]})
    assert message in error, error


def test_a_budget_below_the_teams_per_run_instances_is_allowed_and_reaches_the_teams_pipeline():
    budget = {"max_instances_in_use": 3, "max_concurrent_runs": 2, "on_budget": "wait"}
    settings = settings_with({"teams": [{**TEAM, "budget": budget}]})  # max_instances 4: the budget binds
    runs = runs_for(settings, "research")
    assert (runs.budget.max_instances_in_use, runs.budget.on_budget) == (3, "wait")
    assert budget_summary(runs.budget, 4) == (
        "budget over all runs: at most 2 runs and 3 instances at once; a run over it waits for room until "
        "its retry deadline (max_instances_in_use 3 is below the per-run max_instances 4: a run asking for "
        "more than 3 is refused at its start)"
    )


def test_a_team_whose_run_names_would_pass_sagemakers_63_characters_is_refused():
    error = config_error({"project": "trainstack-long-names", "teams": [{**TEAM, "name": "researchteam"}]})
    assert "teams.0 (researchteam): runs of profile llama-7b-smp would be named with 63 characters" in error


def test_teams_bring_their_own_shares_and_names():
    assert "each team needs its own name; repeated: research" in config_error({"teams": [TEAM, TEAM]})
    assert "with teams, each team's share and weight come from teams" in config_error(
        {"queue": {"enabled": True, "shares": {"a": 1}}, "teams": [TEAM]}
    )
    assert "retrain_on_new_data: with teams, each team sets its own in its entry" in config_error(
        {"retrain_on_new_data": {"profile": "small-torchrun", "prefix": "datasets/corpus/"}, "teams": [TEAM]}
    )


def test_no_identity_belongs_to_two_teams():
    """One principal, or one principal tag (its key in any case), in two teams would start, stop and approve
    both teams' runs: check-config refuses it in one sentence."""
    other = {**TEAM, "name": "search"}
    assert (
        "teams: each team needs its own principals; repeated: arn:aws:iam::111111111111:role/ml-research"
    ) in config_error({"teams": [TEAM, other]})
    tagged = {**TEAM, "principals": [], "principal_tag": {"key": "trainstack-team", "value": "search"}}
    same_tag = {**other, "principals": [], "principal_tag": {"key": "Trainstack-Team", "value": "search"}}
    assert ("teams: each team needs its own principal_tag; repeated: trainstack-team=search") in config_error(
        {"teams": [tagged, same_tag]}
    )
    own_tag = {**same_tag, "principal_tag": {"key": "trainstack-team", "value": "research"}}
    assert len(settings_with({"teams": [tagged, own_tag]}).teams) == 2


def test_a_command_names_its_team_when_the_config_has_teams():
    settings = settings_with({"teams": [TEAM]})
    with pytest.raises(ValueError, match="--team is missing: name one of research"):
        runs_for(settings, None)
    with pytest.raises(
        ValueError, match="--team 'search' is not a team of this config: name one of research"
    ):
        runs_for(settings, "search")
    with pytest.raises(ValueError, match="this config has no teams: section; leave --team out"):
        runs_for(settings_with({}), "research")


def test_check_config_lists_each_teams_pipeline_and_caps(capsys):
    from trainstack.cli import main

    assert main(["check-config", str(TEAMS_CONFIG)]) == 0
    out = capsys.readouterr().out
    assert (
        "team research: stack trainstack-research-pipeline, profiles llama-7b-smp, small-torchrun, at most 4 "
        "instances, 48 h and $20,000.00 per run\n"
        "  budget over all runs: at most 4 runs and 8 instances at once, $100,000.00 of planned cost a "
        "month; a run over it is refused\n" in out
    )
    assert "team search: stack trainstack-search-pipeline" in out
