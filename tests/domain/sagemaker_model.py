"""Check a request against botocore's SageMaker service model, as strictly as the service would.

botocore's ParamValidator checks structure, required members, types and minimums; SageMaker
also enforces the model's enums, maximums and patterns server-side, so those are checked here too.
"""

from __future__ import annotations

from typing import Any

import botocore.session
import regex  # the model's patterns use \p{L}-style classes that `re` lacks
from botocore.model import Shape
from botocore.validate import ParamValidator

SERVICE_MODEL = botocore.session.get_session().get_service_model("sagemaker")


def input_shape(operation: str) -> Shape:
    return SERVICE_MODEL.operation_model(operation).input_shape


def problems(operation: str, params: dict[str, Any]) -> list[str]:
    """Every way `params` breaks the operation's input shape; empty when SageMaker would accept the shape."""
    shape = input_shape(operation)
    report = ParamValidator().validate(params, shape)
    found = [report.generate_report()] if report.has_errors() else []
    _constraints(params, shape, operation, found)
    return found


def _constraints(value: Any, shape: Shape, path: str, found: list[str]) -> None:
    metadata = shape.metadata
    if shape.type_name == "structure" and isinstance(value, dict):
        for name, member in value.items():
            if name in shape.members:
                _constraints(member, shape.members[name], f"{path}.{name}", found)
    elif shape.type_name == "list" and isinstance(value, list):
        if "max" in metadata and len(value) > metadata["max"]:
            found.append(f"{path}: {len(value)} items, at most {metadata['max']}")
        for index, item in enumerate(value):
            _constraints(item, shape.member, f"{path}[{index}]", found)
    elif shape.type_name == "map" and isinstance(value, dict):
        if "max" in metadata and len(value) > metadata["max"]:
            found.append(f"{path}: {len(value)} entries, at most {metadata['max']}")
        for key, item in value.items():
            _constraints(key, shape.key, f"{path} key {key!r}", found)
            _constraints(item, shape.value, f"{path}[{key!r}]", found)
    elif shape.type_name == "string" and isinstance(value, str):
        if shape.enum and value not in shape.enum:
            found.append(f"{path}: {value!r} is not one of the model's enum values")
        if "max" in metadata and len(value) > metadata["max"]:
            found.append(f"{path}: {len(value)} characters, at most {metadata['max']}")
        if "pattern" in metadata and not regex.fullmatch(metadata["pattern"], value):
            found.append(f"{path}: {value!r} does not match {metadata['pattern']}")
    elif shape.type_name in ("integer", "long") and isinstance(value, int):
        if "max" in metadata and value > metadata["max"]:
            found.append(f"{path}: {value} is above the maximum {metadata['max']}")
