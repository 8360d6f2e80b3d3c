"""A Python regular expression as a JSONata regex literal: the one spelling the pipeline's generated
expressions (fault table, quota refusals, input rules) share."""

from __future__ import annotations


def regex_literal(pattern: str, flags: str = "") -> str:
    """`/pattern/flags`, with the pattern's slashes escaped (JSONata ends a regex at an unescaped `/`)."""
    return "/" + pattern.replace("/", "\\/") + "/" + flags
