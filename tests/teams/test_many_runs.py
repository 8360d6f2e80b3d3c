"""Runs of two teams started at once, in both modes, each meeting its own fault (tests/teams/many_runs.py:
capacity, internal and hang faults retried, a user error, a refused input, a stop, a run name started
twice, throttled SageMaker calls in direct mode): every run ends as scripted and nothing is left behind
(no training or Batch job running, no registration lease, no claim of a run that submitted nothing, no
execution running). One run of each scenario here, in queue mode (the teams example as shipped, whose
synthesis the session shares); benchmarks/many_runs.py runs forty and more in both modes, direct mode's
throttled calls included (several seconds of real time a run, and direct mode's own synthesis: too long for
every `make test`)."""

from __future__ import annotations

from tests.teams.many_runs import (
    SCENARIOS,
    leftovers,
    many_runs_world,
    run_all,
    runs_of,
    unexpected_ends,
)

RUNS = len(SCENARIOS)  # every scenario once, the teams alternating


def test_runs_of_two_teams_at_once_end_as_scripted_and_leave_nothing_behind(teams_app, monkeypatch):
    settings, stacks, assembly = teams_app
    runs = runs_of(RUNS)
    with many_runs_world("queue", settings, stacks, assembly, runs, monkeypatch) as world:
        ends = run_all(world, runs)
        assert unexpected_ends(ends) == []
        assert leftovers(world, ends) == []
