"""`retrain_on_new_data:` in the config: start one training run of a profile once new data under a prefix
has been quiet for a while (docs/trigger.md). Off unless the section is present."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Annotated

from pydantic import Field, model_validator

from trainstack.base import StrictModel, matching

# FSx writes its import tasks' reports here (under the dataset prefix, which the file system links): the
# trigger's prefix must not contain it, or each report would count as new data.
FSX_REPORTS_FOLDER = "fsx-import-reports/"


def trigger_table_name(project: str) -> str:
    """The DynamoDB table of the trigger's per-profile state; `trainstack triggers` reads it."""
    return f"{project}-retrain-triggers"


def trigger_machine_name(project: str) -> str:
    return f"{project}-retrain-trigger"


def profile_key(profile: str) -> str:
    """4 hex digits that tell runs of different profiles apart in a run name."""
    return hashlib.sha256(profile.encode()).hexdigest()[:4]


class RetrainOnNewData(StrictModel):
    profile: Annotated[str, Field(min_length=1)]
    # Letters, digits, . _ - and /: characters that URL encoding leaves as they are, both S3's form
    # encoding of keys in its notifications ("red flower.jpg" -> "red+flower.jpg", S3 user guide, "Event
    # message structure") and RFC 3986 percent-encoding, which escapes S3's other "safe" characters
    # !*'(). Whether EventBridge's detail.object.key is encoded is not documented: the rule's prefix
    # matches either way.
    prefix: Annotated[
        str,
        matching(
            r"^([A-Za-z0-9_.-]+/)+$",
            "an S3 key prefix of folders ending in / made of letters, digits, '.', '_' and '-' "
            "(like datasets/corpus/)",
        ),
    ]
    quiet_minutes: Annotated[int, Field(ge=1, le=1440)] = 15
    max_delay_hours: Annotated[float, Field(gt=0, le=168)] = 6
    fsx_import_timeout_minutes: Annotated[int, Field(ge=5, le=1440)] = 60
    # A window whose listing, import or run failed opens again this many times (docs/trigger.md).
    failed_window_retries: Annotated[int, Field(ge=0, le=5)] = 1

    @model_validator(mode="after")
    def _window(self) -> RetrainOnNewData:
        if self.quiet_minutes > self.max_delay_hours * 60:
            raise ValueError(
                f"quiet_minutes ({self.quiet_minutes}) must not exceed max_delay_hours "
                f"({self.max_delay_hours:g} h = {self.max_delay_hours * 60:g} minutes)"
            )
        return self

    def problem(
        self,
        profiles: Sequence[str],
        dataset_prefix: str,
        *,
        field: str = "retrain_on_new_data",
        team_prefix: str | None = None,
    ) -> str | None:
        """What is wrong with this section against the rest of the config, in one sentence, or None.
        `team_prefix`: with teams, the team's own dataset prefix `<dataset.prefix><team>/`, which the prefix
        must be or lie under (it holds no FSx reports folder: a team name has no hyphen)."""
        if self.profile not in profiles:
            whose = "the team's profiles" if team_prefix else "a profile of the config"
            return f"{field}.profile must name {whose} ({', '.join(profiles)}), not '{self.profile}'"
        if team_prefix is not None:
            if not self.prefix.startswith(team_prefix):
                return (
                    f"{field}.prefix must be the team's dataset prefix '{team_prefix}' or a folder under it "
                    f"(like {team_prefix}corpus/), not '{self.prefix}': a team's trigger watches only its "
                    "own data"
                )
            return None
        reports = dataset_prefix + FSX_REPORTS_FOLDER
        if not self.prefix.startswith(dataset_prefix) or self.prefix == dataset_prefix:
            return (
                f"{field}.prefix must be a folder under dataset.prefix '{dataset_prefix}' "
                f"(like {dataset_prefix}corpus/), not '{self.prefix}': training reads the dataset there and "
                f"FSx writes its import reports to {reports}"
            )
        if self.prefix.startswith(reports):
            return f"{field}.prefix must not be under {reports}, where FSx writes its import reports"
        return None


def trigger_of(settings, team: str | None) -> RetrainOnNewData | None:
    """The trigger of one pipeline: the team's own (teams[].retrain_on_new_data), or without teams the
    top-level one."""
    if team is None:
        return settings.retrain_on_new_data
    return next(each.retrain_on_new_data for each in settings.teams if each.name == team)


def triggers_on(settings) -> bool:
    """Any retrain trigger in the config: the top-level one, or (with teams) a team's own."""
    return settings.retrain_on_new_data is not None or any(
        team.retrain_on_new_data is not None for team in settings.teams
    )
