"""What a deploy does to each resource of a whole app: added, removed, updated or replaced.

An app is its synthesized templates by stack name. A resource present before and after is REPLACED when a
property that either source of trainstack.resource_spec marks as create-only changes, nested properties
included, or when it refers (Ref, Fn::GetAtt, Fn::Sub, a cross-stack output) to a resource that is replaced
itself: a new physical resource has a new id. The replacements are found to a fixed point, across stacks.
What changes on every build (asset hashes, Lambda code keys, CDK metadata) lies in properties that update
in place, or is stripped before comparing (strip_build_noise).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from trainstack.resource_spec import ReplacementRules, replacement_rules

Template = dict[str, Any]
App = dict[str, Template]  # stack name -> template
Address = tuple[str, str]  # (stack name, logical id or output name)

ADDED, REMOVED, UPDATED, REPLACED = "added", "removed", "updated", "replaced"
# Parts of a synthesized template that change on every build or never reach a resource: CDK's path metadata,
# its usage-report resource and condition, and the CLI's bootstrap version check.
BUILD_NOISE_TYPES = frozenset({"AWS::CDK::Metadata"})
BUILD_NOISE_SECTIONS = {"Parameters": "BootstrapVersion", "Conditions": "CDKMetadataAvailable"}


def strip_build_noise(template: Template) -> Template:
    """`template` without resource Metadata, AWS::CDK::Metadata and the bootstrap version check."""
    kept = {key: value for key, value in template.items() if key not in ("Metadata", "Rules", "Resources")}
    kept["Resources"] = {
        logical_id: {key: value for key, value in resource.items() if key != "Metadata"}
        for logical_id, resource in template.get("Resources", {}).items()
        if resource.get("Type") not in BUILD_NOISE_TYPES
    }
    for section, noise in BUILD_NOISE_SECTIONS.items():
        rest = {key: value for key, value in template.get(section, {}).items() if key != noise}
        kept.pop(section, None)
        if rest:
            kept[section] = rest
    return kept


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


@dataclass(frozen=True)
class ResourceChange:
    """One resource's fate; `causes` names the properties that replace it, with what the sources say."""

    stack: str
    logical_id: str
    resource_type: str
    action: str
    causes: tuple[str, ...] = ()
    old: Template | None = None  # the resource's template entry before (None when added)
    new: Template | None = None  # and after (None when removed)
    reads_changed_outputs: tuple[str, ...] = ()  # "<stack>.<output>" of other stacks this deploy changes


def _references(value: Any) -> tuple[set[str], set[Address]]:
    """The logical ids (Ref, Fn::GetAtt, Fn::Sub) and cross-stack outputs (Fn::GetStackOutput) it reads."""
    ids: set[str] = set()
    outputs: set[Address] = set()
    if isinstance(value, list):
        for item in value:
            more_ids, more_outputs = _references(item)
            ids |= more_ids
            outputs |= more_outputs
    elif isinstance(value, dict):
        if isinstance(value.get("Ref"), str):
            ids.add(value["Ref"])
        attribute = value.get("Fn::GetAtt")
        if attribute:
            ids.add(attribute[0] if isinstance(attribute, list) else attribute.split(".")[0])
        substituted = value.get("Fn::Sub")
        text = substituted[0] if isinstance(substituted, list) else substituted
        if isinstance(text, str):
            ids |= {part.split("}")[0].split(".")[0] for part in text.split("${")[1:]}
        output = value.get("Fn::GetStackOutput")
        if isinstance(output, dict):
            outputs.add((output.get("StackName"), output.get("OutputName")))
        for item in value.values():
            more_ids, more_outputs = _references(item)
            ids |= more_ids
            outputs |= more_outputs
    return ids, outputs


class _Comparison:
    def __init__(self, old: App, new: App, rules: ReplacementRules) -> None:
        self.old, self.new, self.rules = old, new, rules
        self.replaced: set[Address] = set()
        self.changed_outputs: set[Address] = set()

    def reads_something_new(self, stack: str, value: Any) -> bool:
        ids, outputs = _references(value)
        return any((stack, logical_id) in self.replaced for logical_id in ids) or bool(
            outputs & self.changed_outputs
        )

    def differs(self, stack: str, old: Any, new: Any) -> bool:
        return canonical(old) != canonical(new) or self.reads_something_new(stack, new)

    def replacement_causes(self, stack: str, old: Template, new: Template) -> tuple[str, ...]:
        resource_type = new["Type"]
        if old["Type"] != resource_type:
            return (f"its type (was {old['Type']})",)
        old_properties, new_properties = old.get("Properties", {}), new.get("Properties", {})
        if not self.rules.knows(resource_type):
            # Custom resources update in place (their handler decides); an unknown AWS type fails closed.
            unknown = resource_type.startswith("AWS::") and self.differs(
                stack, old_properties, new_properties
            )
            return ("its properties (the type is in neither source)",) if unknown else ()
        properties = self.rules.resource_properties(resource_type)
        return tuple(self._walk(stack, resource_type, (), properties, old_properties, new_properties))

    def _walk(self, stack, resource_type, path, properties, old: dict, new: dict) -> list[str]:
        causes = []
        for name in sorted(set(old) | set(new)):
            before, after = old.get(name), new.get(name)
            if not self.differs(stack, before, after):
                continue
            known = properties.get(name)
            spec_value = known.causes_replacement if known else None
            verdict = self.rules.verdict(resource_type, (*path, name), spec_value)
            where = ".".join(part for part in (*path, name) if not part.isdigit())
            if verdict.replaces:
                causes.append(f"{where} ({verdict.note})" if verdict.note else where)
            elif known is not None:
                causes += self._walk_value(stack, resource_type, (*path, name), known.type, before, after)
        return causes

    def _walk_value(self, stack, resource_type, path, value_type, old: Any, new: Any) -> list[str]:
        if not self.differs(stack, old, new):
            return []
        if value_type.get("type") == "array" and isinstance(old or [], list) and isinstance(new or [], list):
            old, new = old or [], new or []
            return [
                cause
                for index in range(max(len(old), len(new)))
                for cause in self._walk_value(
                    stack,
                    resource_type,
                    (*path, str(index)),
                    value_type["element"],
                    old[index] if index < len(old) else None,
                    new[index] if index < len(new) else None,
                )
            ]
        nested = self.rules.nested_properties(value_type)
        if nested is None:
            return []
        if not (isinstance(old or {}, dict) and isinstance(new or {}, dict)) or _is_intrinsic(old or new):
            # An intrinsic function where properties belong: which nested property changes is unknowable.
            return [f"{'.'.join(path)} (computed by an intrinsic function: treated as a replacement)"]
        return self._walk(stack, resource_type, path, nested, old or {}, new or {})

    def output_changed(self, stack: str, name: str) -> bool:
        before = self.old.get(stack, {}).get("Outputs", {}).get(name)
        after = self.new[stack].get("Outputs", {}).get(name)
        return (
            before is not None and after is not None and self.differs(stack, before["Value"], after["Value"])
        )

    def settle(self) -> None:
        """Grow the replaced resources and changed outputs until nothing more changes."""
        while True:
            replaced = {
                (stack, logical_id)
                for stack, logical_id, old, new in _kept_resources(self.old, self.new)
                if self.replacement_causes(stack, old, new)
            }
            outputs = {
                (stack, name)
                for stack, template in self.new.items()
                for name in template.get("Outputs", {})
                if self.output_changed(stack, name)
            }
            if replaced == self.replaced and outputs == self.changed_outputs:
                return
            self.replaced, self.changed_outputs = replaced, outputs


def _is_intrinsic(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and next(iter(value)).startswith(("Fn::", "Ref"))


def _kept_resources(old: App, new: App):
    for stack in sorted(set(old) & set(new)):
        before, after = old[stack]["Resources"], new[stack]["Resources"]
        for logical_id in sorted(set(before) & set(after)):
            yield stack, logical_id, before[logical_id], after[logical_id]


def resource_changes(old: App, new: App, rules: ReplacementRules | None = None) -> list[ResourceChange]:
    """Every resource that a deploy of `new` over `old` adds, removes, updates or replaces."""
    comparison = _Comparison(old, new, rules or replacement_rules())
    comparison.settle()
    changes = []
    for stack in sorted(set(old) | set(new)):
        before = old.get(stack, {}).get("Resources", {})
        after = new.get(stack, {}).get("Resources", {})
        for logical_id in sorted(set(before) | set(after)):
            was, now = before.get(logical_id), after.get(logical_id)
            resource_type = (now or was)["Type"]
            if was is None or now is None:
                action = ADDED if was is None else REMOVED
                changes.append(ResourceChange(stack, logical_id, resource_type, action, old=was, new=now))
            elif comparison.differs(stack, was, now):
                causes = comparison.replacement_causes(stack, was, now)
                action = REPLACED if causes else UPDATED
                _, outputs = _references(now)
                read = tuple(
                    sorted(f"{owner}.{name}" for owner, name in outputs & comparison.changed_outputs)
                )
                changes.append(
                    ResourceChange(stack, logical_id, resource_type, action, causes, was, now, read)
                )
    return changes


def change_counts(changes: list[ResourceChange]) -> dict[str, Counter]:
    """Per stack, how many resources each action touches (docs/upgrading.md's tables)."""
    counts: dict[str, Counter] = {}
    for change in changes:
        counts.setdefault(change.stack, Counter())[change.action] += 1
    return counts
