"""`trainstack check-config FILE`: validate a config file the way synth does, one line on error; with
`--against OLD` or `--against-deployed`, review what deploying it would replace, delete or fail on
(trainstack/deploy_findings.py, docs/upgrading.md)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from trainstack.config_loading import ConfigError, load_settings
from trainstack.dataset_events import existing_bucket_warning
from trainstack.fsx_sizing import quota_warning, summary
from trainstack.governance_costs import cost_summary
from trainstack.idle_cost import idle_cost
from trainstack.idle_resources import billed_resources
from trainstack.team_budgets import budget_summary
from trainstack.team_tracking import shared_server_warning
from trainstack.teams import namespace
from trainstack.trigger_settings import triggers_on


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    description = (
        "validate a config file exactly as `make synth` does; print its FSx plan and monthly cost, and what "
        "compliance: control-tower costs, and the deployment's idle monthly cost in its Region"
    )
    parser = subparsers.add_parser("check-config", help=description, description=description)
    parser.add_argument(
        "config",
        nargs="?",
        default=os.environ.get("TRAINSTACK_CONFIG"),
        help="config file (default: $TRAINSTACK_CONFIG, else config/default.yaml)",
    )
    against = parser.add_mutually_exclusive_group()
    against.add_argument(
        "--against",
        metavar="OLD",
        type=Path,
        help="review the deploy over OLD: another config file, or a directory of templates (a cdk.out)",
    )
    against.add_argument(
        "--against-deployed",
        action="store_true",
        help="review the deploy over the stacks deployed in the config's account and region (CloudFormation)",
    )
    parser.add_argument(
        "--templates",
        metavar="DIR",
        type=Path,
        help="the config's templates, already synthesized there (make synth's cdk.out)",
    )
    parser.add_argument(
        "--allow",
        default=os.environ.get("ALLOW_REPLACE", ""),
        help="comma-separated findings to let through, by logical id (short form without CDK's hash, e.g. "
        "FileSystem,DatasetBucket) or stack name (default: $ALLOW_REPLACE)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
    except ConfigError as error:
        print(f"trainstack: {error}", file=sys.stderr)
        return 1
    profiles = len(settings.profiles)
    print(f"config OK: {profiles} profile(s), training AZ {settings.az_label} in {settings.region}")
    for team in settings.teams:  # each team's own pipeline (docs/teams.md)
        print(
            f"team {team.name}: stack {namespace(settings.project, team.name)}-pipeline, profiles "
            f"{', '.join(team.profiles)}, at most {team.max_instances} instances, "
            f"{team.max_runtime_hours:g} h and ${team.max_cost_usd:,.2f} per run"
        )
        if team.budget is not None:
            print(f"  {budget_summary(team.budget, team.max_instances)}")
    plan = settings.fsx_plan
    print(f"FSx for Lustre: {summary(plan)}" if plan else "FSx for Lustre: disabled (fsx.enabled: false)")
    warnings = [
        plan and quota_warning(plan, settings.fsx.deployment_type),
        existing_bucket_warning(settings.dataset, triggers_on(settings)),
        shared_server_warning(settings),
    ]
    for warning in filter(None, warnings):
        print(f"warning: {warning}", file=sys.stderr)
    print("\n".join(idle_cost(billed_resources(settings), settings.region).render()))
    print(cost_summary(settings))
    if args.against is None and not args.against_deployed:
        return 0
    from trainstack.commands.deploy_review import review_deploy  # the review's sources load only here

    return review_deploy(args, settings)
