"""JSONata source text for state definitions: one way to write an expression and a literal."""

from __future__ import annotations

import json
from typing import Any


def expression(text: str) -> str:
    """A JSONata expression as a field value of a JSONata state ("{% ... %}")."""
    return "{% " + text + " %}"


def literal(value: Any) -> str:
    """A JSON value as JSONata source (JSON literals are JSONata literals)."""
    return json.dumps(value, separators=(",", ":"))
