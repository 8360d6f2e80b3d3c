"""What a run name may be: the facts the input rules and the config's team check share (no config import)."""

from __future__ import annotations

from datetime import UTC, datetime

from trainstack.retry_policies import MAX_ATTEMPTS_LIMIT

# Job names are `<runName>-<attempt>` (attempts <= MAX_ATTEMPTS_LIMIT, 3 digits) and SageMaker allows
# 63 characters.
RUN_NAME_MAX_LENGTH = 63 - 1 - len(str(MAX_ATTEMPTS_LIMIT))


def default_run_name_at(project: str, profile: str, now: datetime) -> str:
    """`<project>-<profile>-<UTC yyyymmdd-HHMMSS>`: the run name when neither input nor caller gives one."""
    return f"{project}-{profile}-{now:%Y%m%d-%H%M%S}"


def default_run_name_length(project: str, profile: str) -> int:
    return len(default_run_name_at(project, profile, datetime(2000, 1, 1, tzinfo=UTC)))
