"""Shared pydantic base for every config section."""

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Unknown keys are errors and settings never change after validation."""

    model_config = ConfigDict(extra="forbid", frozen=True)
