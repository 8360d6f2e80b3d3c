"""A Python regular expression as a JSONata regex literal: the one spelling the pipeline's generated
expressions (fault table, quota refusals, input rules) share.

Step Functions' JSONata (2.0.6) runs JavaScript's regular expressions, where `.` matches no line terminator
(\\n, \\r, U+2028, U+2029) and Python's `.` only no \\n: each `.` is written `[^\\n]`, which both read alike
(a progress bar's `\\r` inside a failure reason otherwise changes its class). JavaScript's `$` (no `m` flag)
matches only at the end, Python's also before a final newline: Python callers use re.fullmatch.
"""

from __future__ import annotations

_ANY_BUT_NEWLINE = "[^\\n]"


def _python_dots(pattern: str) -> str:
    """The pattern with each `.` outside a character class and not escaped written `[^\\n]`."""
    written: list[str] = []
    in_class = False
    index = 0
    while index < len(pattern):
        character = pattern[index]
        if character == "\\":
            written.append(pattern[index : index + 2])
            index += 2
            continue
        if in_class:
            in_class = character != "]"
        elif character == "[":
            in_class = True
        elif character == ".":
            character = _ANY_BUT_NEWLINE
        written.append(character)
        index += 1
    return "".join(written)


def regex_literal(pattern: str, flags: str = "") -> str:
    """`/pattern/flags`, with Python's `.` (see above) and the pattern's slashes escaped (JSONata ends a regex
    at an unescaped `/`)."""
    return "/" + _python_dots(pattern).replace("/", "\\/") + "/" + flags
