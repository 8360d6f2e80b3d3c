"""An execution input checked as the state machine checks it: trainstack.input_rules' rules in their
order, then the chosen profile's cost cap (trainstack.cost_cap), giving the RunRequest the input describes
or the one-sentence cause the execution fails with (error `InvalidInput`; SageMaker's own validation of
the request is reported as `InvalidInput` too).

Defaults: `profile` is the first profile of the config; `runName` is `<project>-<execution name>` in the
state machine (the CLI always sends one, see `default_run_name`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from trainstack.cost_cap import cost_cap_problem
from trainstack.input_rules import (
    EXECUTION_NAME_MESSAGE,
    PROFILE_RULES,
    UNSAFE_EXECUTION_NAME_CHARACTER,
    RunConfig,
    input_fields,
    input_rules,
    message_context,
)
from trainstack.job_request import RunRequest
from trainstack.prices import offline_training_prices
from trainstack.run_names import default_run_name_at
from trainstack.team_code import CodeRef


class InvalidInputError(ValueError):
    """Execution input the state machine rejects with error InvalidInput; str() is the cause."""

    def __init__(self, cause: str, field: str = ""):
        super().__init__(cause)
        self.field = field  # the input field at fault; "" for the input as a whole


def default_run_name(settings: RunConfig, profile: str, now: datetime | None = None) -> str:
    """`<project>-<profile>-<UTC yyyymmdd-HHMMSS>`: the run name when neither input nor caller gives one."""
    return default_run_name_at(settings.project, profile, now or datetime.now(UTC))


def validate_execution_input(data: Any, settings: RunConfig, execution_name: str | None = None) -> RunRequest:
    """The RunRequest an input describes, or InvalidInputError with the cause the state machine reports.

    A missing runName becomes `<project>-<execution_name>` as in the state machine, or
    default_run_name() without an execution name; defaults are checked like given values.
    """
    if not settings.profiles:
        raise InvalidInputError("no profiles are configured; add one under profiles: in the config.")
    if execution_name is not None and re.search(UNSAFE_EXECUTION_NAME_CHARACTER, execution_name):
        raise InvalidInputError(EXECUTION_NAME_MESSAGE)
    unknown = ", ".join(sorted(set(data) - set(input_fields(settings)))) if isinstance(data, Mapping) else ""
    context = message_context(settings, unknown)
    rules = input_rules(settings)
    whole_input_rules = [rule for rule in rules if not rule.field]
    for rule in whole_input_rules:
        if not rule.accepts(data, settings):
            raise InvalidInputError(rule.message.format(**context), rule.field)
    values = dict(data)
    values.setdefault("profile", settings.profiles[0].name)
    if "runName" not in values:
        values["runName"] = (
            f"{settings.project}-{execution_name}"
            if execution_name
            else default_run_name(settings, values["profile"])
        )
    for rule in rules:
        if rule.field in values and not rule.accepts(values[rule.field], settings):
            raise InvalidInputError(rule.message.format(**context), rule.field)
    profile = settings.profile(values["profile"])
    for profile_rule in PROFILE_RULES:
        if profile_rule.field in values:
            problem = profile_rule.problem(values[profile_rule.field], profile)
            if problem:
                raise InvalidInputError(problem, profile_rule.field)
    prices = offline_training_prices(settings.region)  # the table the synthesized machines carry
    # The plan models train.py: a team's own code has none, and only its billed cost stops it.
    over_cap = "code" not in values and cost_cap_problem(
        profile, values.get("hyperparameters", {}), values.get("instanceCount"), prices
    )
    if over_cap:
        raise InvalidInputError(over_cap)
    return RunRequest(
        profile=profile.name,
        run_name=values["runName"],
        hyperparameters=dict(values.get("hyperparameters", {})),
        instance_count=None if values.get("instanceCount") is None else int(values["instanceCount"]),
        max_runtime_hours=values.get("maxRuntimeHours"),
        resume_from=values.get("resumeFrom"),
        priority=int(values["priority"]) if "priority" in values else profile.priority,
        share=values.get("share", next(iter(settings.queue.shares), None)),
        code=CodeRef(**values["code"]) if "code" in values else None,
    )
