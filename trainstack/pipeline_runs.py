"""The slice of the config one pipeline reads: whose runs (the namespace), with which profiles, through which
queue, within which limits. A config without `teams:` has one pipeline, namespaced by the project; with
teams, one per team (trainstack/teams.py). It satisfies trainstack.input_rules.RunConfig, so the
state machine and the CLI check an input by the same rules."""

from __future__ import annotations

from dataclasses import dataclass

from trainstack.config import Settings
from trainstack.migration_settings import kept_groups_of
from trainstack.profiles import Profile
from trainstack.queue_settings import QueueSettings, run_names_table_name
from trainstack.team_budgets import TeamBudget
from trainstack.team_tracking import team_mlflow, tracking_server_name
from trainstack.teams import RunLimits, Team, namespace


@dataclass(frozen=True)
class PipelineRuns:
    project: str  # the namespace: `<project>-<team>` with teams, else the project
    profiles: tuple[Profile, ...]
    queue: QueueSettings
    limits: RunLimits = RunLimits()
    team: str | None = None
    region: str | None = None  # the config's: where runs are priced (None: unpriced, no planned cost)
    # Model package groups of this namespace that stay in the template without a registry profile
    # (migrations.keep_model_package_groups).
    kept_groups: tuple[str, ...] = ()
    # Without teams: the run-names table stays while queue mode is off (migrations.keep_run_names_table). The
    # trigger's state table stays while retrain_on_new_data is off (migrations.keep_trigger_table, or with
    # teams the team in migrations.keep_team_trigger_tables).
    keep_run_names_table: bool = False
    keep_trigger_table: bool = False
    # teams[].inherits_single_team_runs: the pre-teams namespace (the project) whose runs this team may resume
    # and whose model versions are its registry baseline, and the other teams' namespaces, which stay theirs.
    inherited: str | None = None
    other_teams: tuple[str, ...] = ()
    # teams[].own_tracking_server: the MLflow tracking server this pipeline creates for the team.
    tracking_server: str | None = None
    budget: TeamBudget | None = None  # teams[].budget: what the team's runs hold at once and spend a month

    @property
    def inherited_prefixes(self) -> tuple[str, ...]:
        """Run prefixes of the pre-teams runs this team may resume (teams[].inherits_single_team_runs)."""
        return (f"{self.inherited}-",) if self.inherited else ()

    @property
    def foreign_prefixes(self) -> tuple[str, ...]:
        """Within the inherited prefixes, the other teams' runs, which stay theirs."""
        return tuple(f"{other}-" for other in self.other_teams) if self.inherited else ()

    def profile(self, name: str) -> Profile:
        for profile in self.profiles:
            if profile.name == name:
                return profile
        raise KeyError(name)


def team_profile(profile: Profile, team: Team, settings: Settings) -> Profile:
    """The profile as the team runs it: the team's cost cap applies when it is the lower one; its jobs log
    to the team's MLflow experiment (trainstack/team_tracking.py)."""
    cap = team.max_cost_usd if profile.max_cost_usd is None else min(profile.max_cost_usd, team.max_cost_usd)
    return profile.model_copy(update={"max_cost_usd": cap, **team_mlflow(profile, team, settings)})


def team_runs(settings: Settings, team: Team) -> PipelineRuns:
    own = namespace(settings.project, team.name)
    return PipelineRuns(
        project=own,
        profiles=tuple(team_profile(settings.profile(name), team, settings) for name in team.profiles),
        # The team's own share only: its runs can name no other, and its first share is the default.
        queue=settings.queue.model_copy(update={"shares": {team.share_identifier: team.weight}}),
        limits=team.limits,
        team=team.name,
        region=settings.region,
        kept_groups=tuple(
            kept_groups_of(settings.migrations.keep_model_package_groups, own, _namespaces(settings))
        ),
        inherited=settings.project if team.inherits_single_team_runs else None,
        keep_trigger_table=team.name in settings.migrations.keep_team_trigger_tables,
        other_teams=tuple(
            namespace(settings.project, other.name) for other in settings.teams if other.name != team.name
        ),
        tracking_server=tracking_server_name(settings.project, team.name)
        if team.own_tracking_server
        else None,
        budget=team.budget,
    )


def _namespaces(settings: Settings) -> list[str]:
    return [namespace(settings.project, team.name) for team in settings.teams] or [settings.project]


def all_pipeline_runs(settings: Settings) -> tuple[PipelineRuns, ...]:
    """One pipeline per team, or the project's one pipeline without teams."""
    if not settings.teams:
        return (
            PipelineRuns(
                project=settings.project,
                profiles=tuple(settings.profiles),
                queue=settings.queue,
                kept_groups=tuple(settings.migrations.keep_model_package_groups),
                keep_run_names_table=settings.migrations.keep_run_names_table,
                keep_trigger_table=settings.migrations.keep_trigger_table,
                region=settings.region,
            ),
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


def inherits_single_team(settings: Settings) -> bool:
    """The deployment had one team before its teams: that team's pipeline stack runs on beside them."""
    return any(team.inherits_single_team_runs for team in settings.teams)


def queue_namespace(settings: Settings) -> str:
    """What the queue's names start with (queue_settings.training_queue_name): the project, or, where a team
    inherits the single team's runs, `<project>-teams`, since the pre-teams pipeline stack, deployed until
    its runs have ended and it is deleted, holds the project's queue names."""
    return f"{settings.project}-teams" if inherits_single_team(settings) else settings.project


def existing_run_names(settings: Settings) -> str | None:
    """With teams inheriting a single team's queued runs, the run-names table that team's stack made
    (retained), claimed in by every team: the names used before stay used."""
    if inherits_single_team(settings) and settings.migrations.keep_run_names_table:
        return run_names_table_name(settings.project)
    return None


def pre_teams_stack_note(settings: Settings) -> str | None:
    """What synth says where a team inherits the single team's runs: the pre-teams pipeline stack is no longer
    part of the app, and how to delete it once its runs have ended (docs/teams.md, "Migrations")."""
    if not inherits_single_team(settings):
        return None
    stack = f"{settings.project}-pipeline"
    return (
        f"{stack}, the pipeline from before teams:, is no longer part of this app; it stays deployed and its "
        "runs finish there; once `aws stepfunctions list-executions --status-filter RUNNING "
        f"--state-machine-arn <its StateMachineArn output>` lists none, `aws cloudformation delete-stack "
        f"--stack-name {stack}` deletes it, keeping its model package groups and run-names table (its state "
        "machines' log groups go with it)"
    )


def shared_queue(settings: Settings) -> QueueSettings:
    """The job queue every pipeline submits to: with teams, fair share between the teams' shares."""
    if not settings.teams:
        return settings.queue
    return settings.queue.model_copy(
        update={"shares": {t.share_identifier: t.weight for t in settings.teams}}
    )
