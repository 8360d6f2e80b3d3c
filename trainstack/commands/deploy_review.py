"""check-config's deploy review: the config's templates against the old ones (a config file, a directory of
templates or the deployed stacks); each finding in one sentence, exit 1 unless `--allow` names them all."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from trainstack.app_templates import TemplatesUnavailable, read_deployed, read_directory, synthesize
from trainstack.config_loading import DEFAULT_CONFIG_PATH
from trainstack.deploy_changes import App
from trainstack.deploy_findings import refusal, refused, review
from trainstack.resource_spec import SpecUnavailable


def old_templates(args: argparse.Namespace, new: App, settings: Any) -> App:
    if args.against_deployed:
        return read_deployed(set(new), settings.project, settings.region)
    against: Path = args.against
    if against.is_dir():
        return read_directory(against)
    if not against.is_file():
        raise TemplatesUnavailable(f"--against {against}: no such config file or template directory")
    return synthesize(against)


def review_deploy(args: argparse.Namespace, settings: Any) -> int:
    try:
        config = Path(args.config or DEFAULT_CONFIG_PATH)
        new = read_directory(args.templates) if args.templates else synthesize(config)
        old = old_templates(args, new, settings)
        _, found = review(old, new)
    except (TemplatesUnavailable, SpecUnavailable) as error:
        print(f"trainstack: {error}", file=sys.stderr)
        return 1
    allowed = {name.strip() for name in args.allow.split(",") if name.strip()}
    blocked = refused(found, allowed)
    for finding in found:
        print(f"{'allowed' if finding not in blocked else 'finding'}: {finding.sentence}")
    if not found:
        print("deploy review: no resource with data replaced or removed, no name or path conflict")
    if blocked:
        print(refusal(blocked), file=sys.stderr)
        return 1
    return 0
