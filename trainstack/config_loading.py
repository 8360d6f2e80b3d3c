"""The config file -> Settings, or a ConfigError: reading the YAML, filling account and region from the
environment, and turning pydantic's first error into one sentence naming the field and what is allowed."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from trainstack.base import PATTERN_WORDS
from trainstack.config import Settings

DEFAULT_CONFIG_PATH = Path(__file__).resolve().parent.parent / "config" / "default.yaml"


class ConfigError(Exception):
    """A config the user wrote that cannot be deployed; str() is one sentence."""


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Walk the model along an error location to list the keys allowed where an unknown one was found."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or current is None:
            continue
        field = current.model_fields.get(part)
        if field is None:
            return []
        current = _model_in(field.annotation)
    return sorted(current.model_fields) if current is not None else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _describe(error: dict[str, Any]) -> str:
    loc = tuple(part for part in error["loc"] if not (isinstance(part, str) and part.startswith("function-")))
    field = ".".join(str(part) for part in loc)
    if error["type"] == "extra_forbidden":
        allowed = _allowed_keys(Settings, loc)
        return f"{field}: unknown key; allowed keys here: {', '.join(allowed)}"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "string_pattern_mismatch":
        message = f"{error['input']!r} is not {PATTERN_WORDS[error['ctx']['pattern']]}"
    # Model-level checks already name their fields in the message.
    return f"{field}: {message}" if field else message


def parse_settings(
    data: Mapping[str, Any], environ: Mapping[str, str] | None = None, source: str = "config"
) -> Settings:
    """Validate a config mapping. The file's values win; what it leaves out is filled in this order:
    region from availability_zone (us-east-1a -> us-east-1), then account and region from
    CDK_DEFAULT_ACCOUNT/CDK_DEFAULT_REGION (the CDK CLI sets them from the caller's AWS profile, and to
    us-east-1 on a machine without one, so they can never override a file)."""
    environ = os.environ if environ is None else environ
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: the file must hold a YAML mapping of settings.")
    merged = dict(data)
    zone = merged.get("availability_zone")
    if not merged.get("region") and isinstance(zone, str) and zone[-1:].isalpha():
        merged["region"] = zone[:-1]
    for key, variable in (("account", "CDK_DEFAULT_ACCOUNT"), ("region", "CDK_DEFAULT_REGION")):
        if not merged.get(key) and environ.get(variable):
            merged[key] = environ[variable]
    try:
        return Settings.model_validate(merged)
    except ValidationError as error:
        raise ConfigError(f"{source}: {_describe(error.errors()[0]).rstrip('.')}.") from None


def load_settings(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    path = Path(path) if path else DEFAULT_CONFIG_PATH
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the config file ({error.strerror}).") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where}.") from None
    return parse_settings(data, environ, source=str(path))
