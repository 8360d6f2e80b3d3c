"""Shared pydantic base for every config section, and patterns that explain themselves in words."""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# pattern -> what it allows, in words: config errors quote these, never the regex itself.
PATTERN_WORDS: dict[str, str] = {}


class StrictModel(BaseModel):
    """Unknown keys are errors and settings never change after validation."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def matching(pattern: str, words: str, **constraints: Any) -> Any:
    """Field(pattern=...) whose mismatch message says `words` (e.g. "an account id of 12 digits")."""
    PATTERN_WORDS[pattern] = words
    return Field(pattern=pattern, **constraints)
