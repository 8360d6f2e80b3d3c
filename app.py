#!/usr/bin/env python3
"""CDK entry point: load the config (-c config=FILE, default config/default.yaml), build the stacks."""

import sys

import aws_cdk as cdk

from stacks.app_builder import build_app
from trainstack.config import ConfigError, load_settings


def main() -> None:
    app = cdk.App()
    try:
        settings = load_settings(app.node.try_get_context("config"))
    except ConfigError as error:
        print(f"trainstack: {error}", file=sys.stderr)
        sys.exit(1)
    build_app(app, settings)
    app.synth()


if __name__ == "__main__":
    main()
