#!/usr/bin/env python3
"""CDK entry point: load the config (-c config=FILE, default config/default.yaml), build the stacks."""

import json
import sys
from pathlib import Path

import aws_cdk as cdk

from trainstack.config_loading import ConfigError, load_settings
from trainstack.fsx_sizing import quota_warning, summary
from trainstack.governance_costs import cost_summary
from trainstack.pipeline_runs import pre_teams_stack_note


def main() -> None:
    app = cdk.App()
    try:
        settings = load_settings(app.node.try_get_context("config"))
    except ConfigError as error:
        print(f"trainstack: {error}", file=sys.stderr)
        sys.exit(1)
    plan = settings.fsx_plan
    if plan:
        # stderr: the CDK CLI shows it, and stdout may carry a template (cdk synth STACK).
        print(f"trainstack: FSx for Lustre: {summary(plan)}", file=sys.stderr)
        warning = quota_warning(plan, settings.fsx.deployment_type)
        if warning:
            print(f"trainstack: warning: {warning}", file=sys.stderr)
    print(f"trainstack: {cost_summary(settings)}", file=sys.stderr)
    if note := pre_teams_stack_note(settings):
        print(f"trainstack: {note}", file=sys.stderr)
    # Imported once the config is valid: a bad config fails before the stack modules load (seconds).
    from stacks.app_builder import build_app
    from trainstack.idle_cost import idle_cost_of_templates

    build_app(app, settings)
    assembly = app.synth()
    remove_other_templates(Path(assembly.directory), {stack.template_file for stack in assembly.stacks})
    # Counted from the templates just written, so it follows the config exactly (trainstack/idle_cost.py).
    templates = [json.loads(Path(stack.template_full_path).read_text()) for stack in assembly.stacks]
    for line in idle_cost_of_templates(templates, settings.region).render():
        print(f"trainstack: {line}", file=sys.stderr)


def remove_other_templates(outdir: Path, current: set[str]) -> None:
    """cdk.out keeps earlier syntheses' files: drop templates of stacks this app no longer has (another
    project name, say), so that lint and deploy see only the current app."""
    for template in outdir.glob("*.template.json"):
        if template.name not in current:
            template.unlink()
            template.with_name(template.name.replace(".template.json", ".assets.json")).unlink(
                missing_ok=True
            )


if __name__ == "__main__":
    main()
