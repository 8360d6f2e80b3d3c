"""Runs of two teams started at once, in both modes, each meeting its own fault (tests/teams/many_runs.py:
capacity, internal and hang faults retried, a user error, a refused input, a stop, a run name started
twice, throttled SageMaker calls in direct mode): every run ends as scripted and nothing is left behind
(no training or Batch job running, no registration lease, no claim of a run that submitted nothing, no
execution running). One run of each scenario per mode here; benchmarks/many_runs.py runs forty and more
(several seconds of real time a run on the emulator: too long for every `make test`)."""

from __future__ import annotations

import pytest

from tests.teams.many_runs import (
    SCENARIOS,
    leftovers,
    many_runs_world,
    run_all,
    runs_of,
    synthesized,
    unexpected_ends,
)

RUNS = len(SCENARIOS)  # every scenario once, the teams alternating


@pytest.fixture(scope="module")
def direct_app(tmp_path_factory):
    return synthesized("direct", tmp_path_factory.mktemp("teams-direct.cdk.out"))


@pytest.mark.parametrize("mode", ["direct", "queue"])
def test_runs_of_two_teams_at_once_end_as_scripted_and_leave_nothing_behind(mode, request, monkeypatch):
    settings, stacks, assembly = request.getfixturevalue("direct_app" if mode == "direct" else "teams_app")
    runs = runs_of(RUNS)
    with many_runs_world(mode, settings, stacks, assembly, runs, monkeypatch) as world:
        ends = run_all(world, runs)
        assert unexpected_ends(ends) == []
        assert leftovers(world, ends) == []
