"""AWS Control Tower's proactive controls, run with cfn-guard over synthesized templates.

The rules and the cfn-guard binary are the ones cdklabs' cdk-validator-cfnguard (the policy-validation
plugin of compliance: control-tower) ships in its jsii bundle; reading them from there keeps this check and
the synth-time one on the same rules."""

from __future__ import annotations

import json
import platform
import subprocess
import tarfile
from pathlib import Path

from stacks.control_tower_rules import plugin_bundle, resource_types, rules_naming_none_of


def unpack_rules(into: Path) -> tuple[Path, Path]:
    """(cfn-guard binary, Control Tower rules folder) unpacked from the installed plugin's bundle."""
    with tarfile.open(plugin_bundle()) as archive:
        archive.extractall(into, filter="tar")
    package = into / "package"
    return package / "bin" / "ubuntu" / platform.machine() / "cfn-guard", package / "rules" / "control-tower"


def rules_for(rules: Path, templates: list[Path]) -> list[Path]:
    """The rule files that can judge `templates`, as synth selects them (stacks/control_tower_rules.py)."""
    skipped = set(rules_naming_none_of(resource_types(templates)))
    return [path for path in sorted((rules / "cfn-guard").rglob("*.guard")) if path.stem not in skipped]


def failed_rules(
    guard: Path, rules: Path, templates: list[Path], *, every_rule: bool = False
) -> dict[str, set[str]]:
    """Template file name -> names of the Control Tower rules it fails: of those that can judge the templates
    (rules_for), or with `every_rule` of every rule."""
    selected = [rules / "cfn-guard"] if every_rule else rules_for(rules, templates)
    result = subprocess.run(
        [
            str(guard),
            "validate",
            *(argument for rule in selected for argument in ("--rules", str(rule))),
            *(argument for template in templates for argument in ("--data", str(template))),
            "--output-format",
            "json",
            "--show-summary",
            "none",
            "--structured",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    # cfn-guard exits 19 when a rule fails, 0 when none does; anything else is an error of its own.
    assert result.returncode in (0, 19), result.stderr
    return {
        Path(report["name"]).name: {check["Rule"]["name"] for check in report.get("not_compliant") or []}
        for report in json.loads(result.stdout)
    }
