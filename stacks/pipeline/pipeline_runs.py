"""The slice of the config the pipeline's state machines read: whose runs, with which profiles, through
which queue. app_builder cuts it from Settings; it satisfies trainstack.execution_input.RunConfig, so the
machine checks its input by the rules the CLI uses."""

from __future__ import annotations

from dataclasses import dataclass

from trainstack.profiles import Profile
from trainstack.queue_settings import QueueSettings


@dataclass(frozen=True)
class PipelineRuns:
    project: str
    profiles: tuple[Profile, ...]
    queue: QueueSettings
