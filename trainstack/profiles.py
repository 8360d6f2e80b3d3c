"""Training profiles: what a pipeline execution runs (strategy, instance preferences, retry policy)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from trainstack.base import StrictModel


class InstancePreference(StrictModel):
    instance_type: Annotated[str, Field(pattern=r"^ml\.[a-z0-9]+\.[a-z0-9]+$")]
    instance_count: Annotated[int, Field(ge=1, le=512)] = 1


class Profile(StrictModel):
    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,30}$")]
    strategy: Literal["smp", "smddp", "torchrun"]
    instance_preferences: Annotated[list[InstancePreference], Field(min_length=1, max_length=5)]
