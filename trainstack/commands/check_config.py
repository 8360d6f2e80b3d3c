"""`trainstack check-config FILE`: validate a config file the way synth does, one line on error."""

from __future__ import annotations

import argparse
import sys

from trainstack.config import ConfigError, load_settings


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("check-config", help="validate a trainstack config file")
    parser.add_argument("config", nargs="?", help="config file (default: config/default.yaml)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
    except ConfigError as error:
        print(f"trainstack: {error}", file=sys.stderr)
        return 1
    profiles = len(settings.profiles)
    print(f"config OK: {profiles} profile(s), training AZ {settings.az_label} in {settings.region}")
    return 0
