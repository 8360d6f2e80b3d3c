"""The slice of the config one pipeline reads: whose runs (the namespace), with which profiles, through which
queue, within which limits. A config without `teams:` has one pipeline, namespaced by the project; with
teams, one per team (trainstack/teams.py). It satisfies trainstack.execution_input.RunConfig, so the
state machine and the CLI check an input by the same rules."""

from __future__ import annotations

from dataclasses import dataclass

from trainstack.config import Settings
from trainstack.profiles import Profile
from trainstack.queue_settings import QueueSettings
from trainstack.teams import RunLimits, Team, namespace


@dataclass(frozen=True)
class PipelineRuns:
    project: str  # the namespace: `<project>-<team>` with teams, else the project
    profiles: tuple[Profile, ...]
    queue: QueueSettings
    limits: RunLimits = RunLimits()
    team: str | None = None
    region: str | None = None  # the config's: where runs are priced (None: unpriced, no planned cost)

    def profile(self, name: str) -> Profile:
        for profile in self.profiles:
            if profile.name == name:
                return profile
        raise KeyError(name)


def team_profile(profile: Profile, team: Team) -> Profile:
    """The profile as the team runs it: the team's cost cap applies when it is the lower one."""
    cap = team.max_cost_usd if profile.max_cost_usd is None else min(profile.max_cost_usd, team.max_cost_usd)
    return profile.model_copy(update={"max_cost_usd": cap})


def team_runs(settings: Settings, team: Team) -> PipelineRuns:
    return PipelineRuns(
        project=namespace(settings.project, team.name),
        profiles=tuple(team_profile(settings.profile(name), team) for name in team.profiles),
        # The team's own share only: its runs can name no other, and its first share is the default.
        queue=settings.queue.model_copy(update={"shares": {team.share_identifier: team.weight}}),
        limits=team.limits,
        team=team.name,
        region=settings.region,
    )


def all_pipeline_runs(settings: Settings) -> tuple[PipelineRuns, ...]:
    """One pipeline per team, or the project's one pipeline without teams."""
    if not settings.teams:
        return (
            PipelineRuns(settings.project, tuple(settings.profiles), settings.queue, region=settings.region),
        )
    return tuple(team_runs(settings, team) for team in settings.teams)


def runs_for(settings: Settings, team: str | None) -> PipelineRuns:
    """The pipeline a command acts on; with teams, `team` must name one (ValueError says which exist)."""
    if not settings.teams:
        if team is not None:
            raise ValueError(f"--team {team}: this config has no teams: section; leave --team out")
        return all_pipeline_runs(settings)[0]
    names = [t.name for t in settings.teams]
    if team not in names:
        given = "is missing" if team is None else f"'{team}' is not a team of this config"
        raise ValueError(f"--team {given}: name one of {', '.join(names)}")
    return team_runs(settings, next(t for t in settings.teams if t.name == team))


def shared_queue(settings: Settings) -> QueueSettings:
    """The job queue every pipeline submits to: with teams, fair share between the teams' shares."""
    if not settings.teams:
        return settings.queue
    return settings.queue.model_copy(
        update={"shares": {t.share_identifier: t.weight for t in settings.teams}}
    )
