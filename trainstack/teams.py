"""Teams of one shared deployment (the `teams:` section of the config; docs/teams.md).

Each team gets a pipeline of its own, namespaced `<project>-<team>`: its own state machines (the team's
name is fixed in their definitions, never read from an execution input), its own SageMaker execution
role, run prefixes `<project>-<team>-*`, dataset prefix `<dataset.prefix><team>/` (FSx directory
`/<mount>/<team>`), model package groups, fair share and caps. A config without `teams:` is one team
whose namespace is the project: everything is named as it always was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field, model_validator

from trainstack.base import StrictModel, matching
from trainstack.profiles import MAX_PRIORITY, MAX_RUNTIME_HOURS_LIMIT
from trainstack.run_names import RUN_NAME_MAX_LENGTH, default_run_name_length
from trainstack.team_budgets import TeamBudget, check_team_budget
from trainstack.trigger_settings import RetrainOnNewData

# One team's namespace `<project>-<team>` must never be a prefix of another's (IAM grants on
# `<project>-<team>-*`): a team name holds no hyphen. Letters and digits also make it a valid AWS Batch
# share identifier; 12 characters leave room for run names within SageMaker's 63 (run_name_room).
TEAM_NAME_PATTERN = r"^[a-z][a-z0-9]{0,11}$"
MAX_INSTANCE_COUNT = 512  # instances one run may ask for, with or without teams
# The IAM principals a team's start policy may be attached to (same account: roles and users).
PRINCIPAL_ARN_PATTERN = (
    r"^arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/([A-Za-z0-9_+=,.@-]+/)*[A-Za-z0-9_+=,.@-]{1,128}$"
)
# Principal tags: IAM's own key and value rules (letters, digits, spaces and + - = . _ : / @).
TAG_KEY_PATTERN = r"^[A-Za-z0-9_+=.:/@ -]{1,128}$"
TAG_VALUE_PATTERN = r"^[A-Za-z0-9_+=.:/@ -]{0,256}$"


@dataclass(frozen=True)
class RunLimits:
    """What one run may ask for at most: the team's caps, or the product's own limits without teams."""

    max_instance_count: int = MAX_INSTANCE_COUNT
    max_runtime_hours: float = MAX_RUNTIME_HOURS_LIMIT
    max_priority: int = MAX_PRIORITY


class PrincipalTag(StrictModel):
    """Principals carrying this tag may start the team's runs once the platform team attaches the team's
    start policy to them (a group, a permission set): the policy's statements require the tag."""

    key: Annotated[
        str, matching(TAG_KEY_PATTERN, "an IAM tag key: 1 to 128 letters, digits, spaces or +-=.:/@_")
    ]
    value: Annotated[
        str, matching(TAG_VALUE_PATTERN, "an IAM tag value: up to 256 letters, digits, spaces or +-=.:/@_")
    ]


class Team(StrictModel):
    name: Annotated[
        str,
        matching(TEAM_NAME_PATTERN, "1 to 12 lowercase letters or digits starting with a letter (no hyphen)"),
    ]
    # Names of the config's profiles this team may run.
    profiles: Annotated[list[str], Field(min_length=1)]
    # Who may start, follow, stop and approve the team's runs: roles or users of the account that get the
    # team's start policy, or a principal tag that policy requires (attach it where the tag lives).
    principals: list[
        Annotated[
            str,
            matching(
                PRINCIPAL_ARN_PATTERN, "an IAM role or user ARN like arn:aws:iam::111111111111:role/ml-a"
            ),
        ]
    ] = []
    principal_tag: PrincipalTag | None = None
    # Caps on every run of the team, whatever the profile: instances, hours and planned/billed cost.
    max_instances: Annotated[int, Field(ge=1, le=MAX_INSTANCE_COUNT)]
    max_runtime_hours: Annotated[float, Field(gt=0, le=MAX_RUNTIME_HOURS_LIMIT)]
    max_cost_usd: Annotated[float, Field(gt=0)]
    # Queue mode: the team's fair share (AWS Batch share identifier, default the team's name) and weight,
    # and the highest schedulingPriority its runs may ask for.
    share: Annotated[
        str | None, matching(r"^[A-Za-z0-9]{1,255}$", "letters and digits (a Batch share identifier)")
    ] = None
    weight: Annotated[int, Field(ge=1, le=1000)] = 1
    max_priority: Annotated[int, Field(ge=0, le=MAX_PRIORITY)] = 0
    # The deployment had no teams before: this team may resume the runs started then (`<project>-*` outside
    # every team's namespace) and registers against their model versions (docs/teams.md, "Migrations").
    inherits_single_team_runs: bool = False
    # New data under the team's own dataset prefix starts one run of one of its profiles in its own pipeline
    # (docs/trigger.md, "With teams"); off unless set.
    retrain_on_new_data: RetrainOnNewData | None = None
    # A SageMaker managed MLflow tracking server of the team's own, `<project>-<team>`, created with its
    # pipeline: every job of the team logs there (trainstack/team_tracking.py).
    own_tracking_server: bool = False
    # What the team holds at once and spends in a month, over all its runs (trainstack/team_budgets.py).
    budget: TeamBudget | None = None

    @model_validator(mode="after")
    def _someone_may_start(self) -> Team:
        if not self.principals and self.principal_tag is None:
            raise ValueError(
                f"team {self.name}: give principals (IAM role or user ARNs) or principal_tag, or nobody can "
                "start its runs"
            )
        return self

    @property
    def share_identifier(self) -> str:
        return self.share or self.name

    @property
    def limits(self) -> RunLimits:
        return RunLimits(self.max_instances, self.max_runtime_hours, self.max_priority)


def namespace(project: str, team: str | None) -> str:
    """What a team's resources, run names and prefixes start with: `<project>-<team>`, or the project."""
    return f"{project}-{team}" if team else project


def team_dataset_prefix(dataset_prefix: str, team: str) -> str:
    """The team's own dataset prefix in the dataset bucket: what its jobs read and its trigger watches."""
    return f"{dataset_prefix}{team}/"


def authorizing_tag_keys(teams: Sequence[Team]) -> list[str]:
    """The principal tag keys the teams' start policies authorize by: no member of any team may set them."""
    return sorted({team.principal_tag.key for team in teams if team.principal_tag is not None})


def check_teams(settings: Any) -> Any:
    """Settings' after-validator: every team runs only profiles it can run under its caps, in names that fit,
    with a share, a name and identities of its own (one sentence naming the field if not)."""
    for field, values in (
        ("name", [team.name for team in settings.teams]),
        ("share", [team.share_identifier for team in settings.teams]),
        # One identity in two teams would start, stop and approve both teams' runs.
        ("principals", [arn for team in settings.teams for arn in set(team.principals)]),
        (
            "principal_tag",
            # IAM tag keys are case-insensitive: `Team` and `team` are one key.
            [
                f"{team.principal_tag.key.lower()}={team.principal_tag.value}"
                for team in settings.teams
                if team.principal_tag is not None
            ],
        ),
    ):
        if repeated := sorted({value for value in values if values.count(value) > 1}):
            raise ValueError(f"teams: each team needs its own {field}; repeated: {', '.join(repeated)}")
    if len(heirs := [team.name for team in settings.teams if team.inherits_single_team_runs]) > 1:
        raise ValueError(f"teams: only one team may set inherits_single_team_runs; set by {', '.join(heirs)}")
    if settings.teams and settings.queue.shares:
        raise ValueError("queue.shares: with teams, each team's share and weight come from teams; remove it")
    if settings.teams and settings.retrain_on_new_data is not None:
        raise ValueError(
            "retrain_on_new_data: with teams, each team sets its own in its entry "
            "(teams[].retrain_on_new_data, on its dataset prefix <dataset.prefix><team>/); move it there"
        )
    known = [profile.name for profile in settings.profiles]
    for index, team in enumerate(settings.teams):
        where = f"teams.{index} ({team.name})"
        for name in team.profiles:
            if name not in known:
                raise ValueError(
                    f"{where}.profiles: '{name}' is not a profile; use one of {', '.join(known)}"
                )
            profile = settings.profile(name)
            if (
                longest := default_run_name_length(namespace(settings.project, team.name), name)
            ) > RUN_NAME_MAX_LENGTH:
                raise ValueError(
                    f"{where}: runs of profile {name} would be named with {longest} characters, "
                    "more than "
                    f"{RUN_NAME_MAX_LENGTH}; shorten the team's, the profile's or the project's name"
                )
            counts = [preference.instance_count for preference in profile.instance_preferences]
            if max(counts) > team.max_instances:
                raise ValueError(
                    f"{where}: profile {name} asks for {max(counts)} instances, more than the team's "
                    f"max_instances ({team.max_instances}); raise the cap or remove the profile"
                )
            if profile.max_runtime_hours > team.max_runtime_hours:
                raise ValueError(
                    f"{where}: profile {name} runs up to {profile.max_runtime_hours:g} hours, more than "
                    f"the team's max_runtime_hours ({team.max_runtime_hours:g}); raise the cap or remove "
                    "the profile"
                )
            if (profile.priority or 0) > team.max_priority:
                raise ValueError(
                    f"{where}: profile {name} has priority {profile.priority}, above the team's "
                    f"max_priority ({team.max_priority})"
                )
        if team.retrain_on_new_data is not None and (
            problem := team.retrain_on_new_data.problem(
                team.profiles,
                settings.dataset.prefix,
                field=f"{where}.retrain_on_new_data",
                team_prefix=team_dataset_prefix(settings.dataset.prefix, team.name),
            )
        ):
            raise ValueError(problem)
        if team.budget is not None:
            check_team_budget(
                where,
                team.budget,
                team.max_cost_usd,
                {
                    name: max(p.instance_count for p in settings.profile(name).instance_preferences)
                    for name in team.profiles
                },
            )
        if settings.queue.enabled and team.max_instances > settings.queue.max_instances:
            raise ValueError(
                f"{where}.max_instances ({team.max_instances}) is more than queue.max_instances "
                f"({settings.queue.max_instances}): such a run would wait forever"
            )
    return settings
