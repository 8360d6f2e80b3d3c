"""The layout as rooms and arrows (issue 25): the product package never reaches into the CDK app or the local
AWS world, and no module imports itself back through others. Every import counts, function-level and
TYPE_CHECKING ones included: a circle hidden in a function is still a circle to the reader."""

from __future__ import annotations

import ast
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("trainstack", "stacks", "localaws", "training_scripts")


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for package in PACKAGES for path in (REPO / package).rglob("*.py")}


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The repository modules `name` imports (a `from package import module` counts as the module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(f"{target}."):
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _package(module: str) -> str:
    return module.split(".")[0]


def test_the_product_package_imports_neither_cdk_code_nor_the_local_aws_world():
    climbing = sorted(
        f"{module} -> {target}"
        for module, targets in _graph().items()
        if _package(module) == "trainstack"
        for target in targets
        if _package(target) in ("stacks", "localaws")
    )
    assert climbing == []


def test_no_module_imports_itself_back():
    graph = _graph()
    circles: list[list[str]] = []
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = "open"
        stack.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                circles.append(stack[stack.index(target) :] + [target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert [" -> ".join(circle) for circle in circles] == []


@pytest.mark.parametrize("package", ["localaws", "tests"])
def test_pip_install_leaves_out_the_stand_ins(package):
    """pyproject's package list (what `pip install .` installs) holds no fake and no demo."""
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"][
        "include"
    ]
    assert not any(fnmatch(package, pattern) for pattern in patterns)
    assert any(fnmatch("trainstack.commands", pattern) for pattern in patterns)
