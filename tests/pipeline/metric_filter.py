"""CloudWatch Logs metric filter patterns applied to log events: the subset trainstack's filters use.

AWS's "Filter pattern syntax for metric filters, subscription filters, filter log events, and Live Tail"
(JSON log events): `{ $.type = "ExecutionFailed" && $.details.error != "InvalidInput" }`, a property
selected by `$.a.b` compared with a string by `=` or `!=`, comparisons joined by `&&`. Assumed: a
comparison with a property the event lacks (or that is no string) does not match, for `=` and `!=` alike;
the patterns here only compare properties their events always have. Any other syntax raises, so a
pattern outside this subset cannot pass a test unnoticed.
"""

from __future__ import annotations

import json
import re

_COMPARISON = re.compile(r'\s*\$\.([A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*)\s*(=|!=)\s*"([^"*]*)"\s*')


def matches(pattern: str, message: str) -> bool:
    text = pattern.strip()
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError(f"not a JSON filter pattern: {pattern}")
    event = json.loads(message)
    for comparison in text[1:-1].split("&&"):
        found = _COMPARISON.fullmatch(comparison)
        if found is None:
            raise ValueError(f"outside the supported syntax: {comparison!r}")
        path, operator, expected = found.groups()
        actual = event
        for key in path.split("."):
            actual = actual.get(key) if isinstance(actual, dict) else None
        if not isinstance(actual, str) or (actual == expected) != (operator == "="):
            return False
    return True


def published(pattern: str, messages: list[str]) -> int:
    """What a metric filter with metric value 1 adds up to over these log events."""
    return sum(matches(pattern, message) for message in messages)
