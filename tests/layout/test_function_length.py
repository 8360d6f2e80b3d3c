"""Every function in stacks/ is short enough to read at once: a state machine is named state builders and
one chain, not one long constructor body (issue 25)."""

from __future__ import annotations

import ast
from pathlib import Path

STACKS = Path(__file__).resolve().parents[2] / "stacks"
# Lines of one function body, decorators and docstring included.
MAX_FUNCTION_LINES = 80


def long_functions(root: Path, limit: int) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_in_stacks_is_longer_than_the_limit():
    assert long_functions(STACKS, MAX_FUNCTION_LINES) == []
