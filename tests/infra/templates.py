"""Reading synthesized templates: resources by type, cross-stack references, asset hashes masked."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

# Asset hashes change with any byte of an asset (Lambda code, Docker context); snapshots must not.
ASSET_HASH = re.compile(r"[0-9a-f]{64}")


def mask_asset_hashes(template: dict[str, Any]) -> dict[str, Any]:
    """The template with every 64-hex asset hash (S3 keys, image tags, asset paths) replaced by a marker."""
    return json.loads(ASSET_HASH.sub("<asset-hash>", json.dumps(template)))


def load_templates(outdir: str | Path) -> dict[str, dict[str, Any]]:
    """Every template of a cloud assembly directory, keyed by stack name."""
    return {
        path.name.removesuffix(".template.json"): json.loads(path.read_text())
        for path in sorted(Path(outdir).glob("*.template.json"))
    }


def resources(template: dict[str, Any], resource_type: str) -> dict[str, dict[str, Any]]:
    return {name: body for name, body in template["Resources"].items() if body["Type"] == resource_type}


def only(template: dict[str, Any], resource_type: str) -> dict[str, Any]:
    found = resources(template, resource_type)
    assert len(found) == 1, f"expected one {resource_type}, found {sorted(found)}"
    return next(iter(found.values()))


def follow_reference(value: Any, templates: dict[str, dict[str, Any]]) -> Any:
    """Replace a cross-stack reference (Fn::ImportValue of a CDK export, Fn::GetStackOutput) by the producing
    stack's output value, so a test can see which resource a consumer really points at."""
    if isinstance(value, dict) and "Fn::GetStackOutput" in value:
        reference = value["Fn::GetStackOutput"]
        return templates[reference["StackName"]]["Outputs"][reference["OutputName"]]["Value"]
    if isinstance(value, dict) and "Fn::ImportValue" in value:
        for template in templates.values():
            for output in template.get("Outputs", {}).values():
                if output.get("Export", {}).get("Name") == value["Fn::ImportValue"]:
                    return output["Value"]
        raise AssertionError(f"no stack exports {value['Fn::ImportValue']}")
    return value
