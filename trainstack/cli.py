"""`trainstack` console script: one subcommand per module in trainstack.commands."""

from __future__ import annotations

import argparse
import importlib
import sys

# Each module exposes add_parser(subparsers) and sets `handler` (args -> exit code) on its parser.
COMMAND_MODULES = ("check_config", "size_fsx", "start", "status")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainstack", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"trainstack.commands.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"trainstack.commands.{name}":
                raise
            continue
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
