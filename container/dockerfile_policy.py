"""Policy for container/Dockerfile that hadolint cannot express; `python container/dockerfile_policy.py FILE`.

Fails on:
- a base image (FROM) without both a tag and a digest, or with the tag `latest`;
- a second NCCL, EFA, libfabric or aws-ofi-nccl install (the base image carries AWS's tested set), including
  pip installs of torch or nvidia-nccl, which bring their own NCCL;
- LD_PRELOAD of an NCCL library.
Requirement files the Dockerfile installs can be checked too (`--requirements`).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

_VARIABLE = re.compile(r"\$\{(\w+)(?::[-+][^}]*)?\}|\$(\w+)")
# Installs of what the base image already provides, in any RUN.
_SECOND_INSTALLS = (
    (re.compile(r"efa_installer\.sh|aws-efa-installer"), "installs EFA (the EFA installer)"),
    (re.compile(r"\blibnccl2\b|\blibnccl-dev\b"), "installs NCCL from apt"),
    (re.compile(r"nvidia-nccl"), "installs NCCL from pip (nvidia-nccl-*)"),
    (re.compile(r"NVIDIA/nccl(?:\.git)?(?=[\s\"'/]|$)"), "builds NCCL from source"),
    (re.compile(r"(?:conda|mamba)\s+install\b[^&;|]*\bnccl\b"), "installs NCCL from conda"),
    (re.compile(r"aws-ofi-nccl"), "installs a second aws-ofi-nccl plugin"),
    (re.compile(r"\blibfabric\b"), "installs libfabric"),
    (re.compile(r"pip\d?\s+install\b[^&;|]*\btorch(?:[=<>~!\s\"']|$)"), "installs torch (it brings an NCCL)"),
)
_LD_PRELOAD_NCCL = re.compile(r"LD_PRELOAD(?:\s*=\s*|\s+)[\"']?[^\s\"']*nccl", re.IGNORECASE)
_REQUIREMENT_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_FORBIDDEN_REQUIREMENTS = re.compile(r"^(torch|nvidia-nccl.*)$", re.IGNORECASE)


@dataclass(frozen=True)
class Instruction:
    line: int
    keyword: str
    arguments: str


@dataclass(frozen=True)
class Violation:
    line: int
    rule: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: [{self.rule}] {self.message}"


def parse(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped; line = where each starts."""
    instructions: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1])
            continue
        pending.append(stripped)
        keyword, _, arguments = " ".join(pending).partition(" ")
        instructions.append(Instruction(start, keyword.upper(), arguments.strip()))
        pending = []
    return instructions


def _arg_defaults(instructions: Iterable[Instruction]) -> dict[str, str | None]:
    """Global ARGs (before the first FROM) with their defaults; None when declared without one."""
    defaults: dict[str, str | None] = {}
    for instruction in instructions:
        if instruction.keyword == "FROM":
            break
        if instruction.keyword == "ARG":
            name, has_default, value = instruction.arguments.partition("=")
            defaults[name.strip()] = _arg_value(instruction) if has_default else None
    return defaults


def _arg_value(instruction: Instruction) -> str:
    return instruction.arguments.partition("=")[2].strip().strip("\"'")


def _check_from(instruction: Instruction, stages: set[str], args: dict[str, str | None]) -> list[Violation]:
    parts = instruction.arguments.split()
    image = next(part for part in parts if not part.startswith("--"))
    if image.lower() == "scratch" or image in stages:
        return []
    undeclared = [a or b for a, b in _VARIABLE.findall(image) if (a or b) not in args]
    if undeclared:
        return [
            Violation(
                instruction.line,
                "undeclared-arg",
                f"FROM uses ${{{undeclared[0]}}}, which no ARG before the first FROM declares",
            )
        ]
    reference, _, digest = image.partition("@")
    last_segment = reference.rsplit("/", 1)[-1]
    tag = last_segment.partition(":")[2]
    resolved_tag = _VARIABLE.sub(lambda match: args.get(match.group(1) or match.group(2)) or "", tag)
    violations = []
    if not tag:
        violations.append(Violation(instruction.line, "unpinned-base", f"base image {image} has no tag"))
    elif resolved_tag == "latest":
        violations.append(Violation(instruction.line, "latest-tag", f"base image {image} is tagged latest"))
    if not digest:
        violations.append(
            Violation(instruction.line, "unpinned-base", f"base image {image} has no @sha256 digest")
        )
    return violations


def check(text: str, requirements: Sequence[tuple[str, str]] = ()) -> list[Violation]:
    """All violations in a Dockerfile's text and in (name, text) requirement files it installs."""
    instructions = parse(text)
    args = _arg_defaults(instructions)
    stages: set[str] = set()
    violations: list[Violation] = []
    for instruction in instructions:
        if instruction.keyword == "FROM":
            violations += _check_from(instruction, stages, args)
            words = instruction.arguments.split()
            if len(words) >= 3 and words[-2].upper() == "AS":
                stages.add(words[-1])
        elif instruction.keyword == "ARG" and _arg_value(instruction) == "latest":
            violations.append(Violation(instruction.line, "latest-tag", f"ARG {instruction.arguments}"))
        if instruction.keyword == "RUN":
            for pattern, what in _SECOND_INSTALLS:
                if pattern.search(instruction.arguments):
                    violations.append(
                        Violation(
                            instruction.line,
                            "second-nccl-or-efa",
                            f"RUN {what}; the base image's NCCL/EFA/aws-ofi-nccl set must stay the only one",
                        )
                    )
        if instruction.keyword in {"ENV", "RUN"} and _LD_PRELOAD_NCCL.search(instruction.arguments):
            violations.append(Violation(instruction.line, "ld-preload-nccl", "LD_PRELOAD of an NCCL library"))
    for name, requirement_text in requirements:
        for number, line in enumerate(requirement_text.splitlines(), start=1):
            match = _REQUIREMENT_NAME.match(line.split("#", 1)[0])
            if match and _FORBIDDEN_REQUIREMENTS.match(match.group(1)):
                violations.append(
                    Violation(
                        number,
                        "second-nccl-or-efa",
                        f"{name} installs {match.group(1)}, which brings its own NCCL",
                    )
                )
    return violations


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dockerfile", type=Path)
    parser.add_argument("--requirements", type=Path, action="append", default=[])
    args = parser.parse_args(argv)
    requirements = [(str(path), path.read_text()) for path in args.requirements]
    violations = check(args.dockerfile.read_text(), requirements)
    for violation in violations:
        print(f"{args.dockerfile}: {violation}", file=sys.stderr)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
