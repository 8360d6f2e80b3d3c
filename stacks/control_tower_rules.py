"""AWS Control Tower's proactive controls at synth (compliance: control-tower): cdklabs' cfn-guard plugin,
run with the rules that can judge the synthesized templates.

cfn-guard's cost grows with rules times templates, and of the plugin's 237 rules a governed app's templates
hold the resource types of about a quarter: a governed teams app spent 13.8 CPU-s in cfn-guard, more than
the synthesis itself. Each rule file states the resource types it reports on, and its first scenario is a
SKIP for a template that holds none of them (the rules' own specifications): a rule that names none of the
templates' types could only skip, so it is left out of the run, not out of the report's rule list.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import re
import tarfile
from collections.abc import Sequence
from pathlib import Path

import aws_cdk as cdk
import jsii
from cdklabs.cdk_validator_cfnguard import CfnGuardValidator

RESOURCE_TYPE = re.compile(r"AWS::\w+::\w+")
RULES_FOLDER = "package/rules/control-tower/cfn-guard/"


def plugin_bundle() -> Path:
    """The installed plugin's jsii bundle: its rules and the cfn-guard binary, as the plugin runs them."""
    return next(
        Path(str(path))
        for path in importlib.resources.files("cdklabs.cdk_validator_cfnguard._jsii").iterdir()
        if path.name.endswith(".jsii.tgz")
    )


@functools.cache
def types_of_rules() -> dict[str, frozenset[str]]:
    """Rule name (its file's stem, as the plugin's disabled_rules names it) -> every resource type its file
    names, read from the plugin's own bundle, which holds the rules the plugin runs."""
    named: dict[str, frozenset[str]] = {}
    with tarfile.open(str(plugin_bundle())) as archive:
        for member in archive:
            if member.name.startswith(RULES_FOLDER) and member.name.endswith(".guard"):
                text = archive.extractfile(member).read().decode()
                named[Path(member.name).stem] = frozenset(RESOURCE_TYPE.findall(text))
    return named


def rules_naming_none_of(present: set[str]) -> list[str]:
    """The rules that name none of the `present` resource types: with them, every rule but one that names
    no type at all (none does today; such a rule is kept, to fail closed)."""
    return sorted(name for name, types in types_of_rules().items() if types and not types & present)


def resource_types(template_paths: Sequence[str | Path]) -> set[str]:
    return {
        body["Type"]
        for template in template_paths
        for body in json.loads(Path(template).read_text()).get("Resources", {}).values()
    }


# The plugin interface CfnGuardValidator implements (aws-cdk-lib's Beta1): the report it returns is of that
# interface's type, which CDK refuses from a plugin that declares the newer one.
@jsii.implements(cdk.IPolicyValidationPluginBeta1)
class ControlTowerRules:
    """cdklabs' CfnGuardValidator with the Control Tower rules less `waived`, each synth running only the
    rules that name a resource type its templates hold."""

    def __init__(self, waived: Sequence[str]) -> None:
        self._waived = list(waived)
        self._every_rule = CfnGuardValidator(disabled_rules=self._waived)

    @property
    def name(self) -> str:
        return self._every_rule.name

    @property
    def version(self) -> str | None:
        return self._every_rule.version

    @property
    def rule_ids(self) -> list[str] | None:
        return self._every_rule.rule_ids

    def validate(self, context: cdk.IPolicyValidationContextBeta1) -> cdk.PolicyValidationPluginReportBeta1:
        skipping = rules_naming_none_of(resource_types(context.template_paths))
        if len(skipping) + len(self._waived) >= len(types_of_rules()):
            return self._every_rule.validate(context)  # nothing left to run: run them all, as the plugin does
        return CfnGuardValidator(disabled_rules=[*self._waived, *skipping]).validate(context)
