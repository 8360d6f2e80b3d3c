"""What a deploy would lose or fail on, one sentence each: the deploy review of `trainstack check-config
--against`, `make diff` and `make deploy` (docs/upgrading.md).

A finding is one of:
- a stateful resource (STATEFUL_DATA's types) replaced, removed, or moved to a new logical id;
- a resource with a fixed physical name created again while the old one holds the name ("already exists"),
  or replaced in place (CloudFormation cannot replace a custom-named resource);
- a data repository association created while another one on the same file system conflicts with it
  (trainstack/association_rules.py): CloudFormation creates new resources before it deletes old ones;
- a stack that is no longer in the app: `cdk deploy --all` leaves it deployed, untouched;
- a stack whose template text stays the same while an output of another stack it reads changes: the CDK
  CLI skips deploying an unchanged template, so the stack keeps the old value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainstack.association_rules import Association, conflict
from trainstack.deploy_changes import (
    ADDED,
    REMOVED,
    REPLACED,
    App,
    ResourceChange,
    Template,
    canonical,
    resource_changes,
)
from trainstack.resource_spec import ReplacementRules, replacement_rules

ASSOCIATION = "AWS::FSx::DataRepositoryAssociation"
# Resources that hold data, and the data at stake when one goes.
STATEFUL_DATA = {
    "AWS::FSx::FileSystem": (
        "file system",
        "its files: the imported dataset, fsx checkpoints, files written to it",
    ),
    ASSOCIATION: ("data repository association", "the import and export between its directory and S3"),
    "AWS::S3::Bucket": ("bucket", "its objects"),
    "AWS::S3Express::DirectoryBucket": ("directory bucket", "its objects (s3-express checkpoints)"),
    "AWS::DynamoDB::Table": ("table", "its items"),
    "AWS::DynamoDB::GlobalTable": ("table", "its items"),
    "AWS::ECR::Repository": ("repository", "its images"),
    "AWS::KMS::Key": ("key", "the key material: what it encrypted is unreadable once the key is deleted"),
    "AWS::Logs::LogGroup": ("log group", "its log events"),
    "AWS::SageMaker::ModelPackageGroup": ("model package group", "its model versions and their approvals"),
    "AWS::SageMaker::MlflowTrackingServer": (
        "MLflow tracking server",
        "its experiments and runs (their artifacts stay in the artifact bucket)",
    ),
}
RETAINED = ("Retain", "RetainExceptOnCreate")
CDK_HASH = re.compile(r"(?P<name>.+?)[0-9A-F]{8}")


@dataclass(frozen=True)
class Finding:
    """One destructive or failing change; `logical_id` None for a whole stack."""

    stack: str
    logical_id: str | None
    sentence: str

    @property
    def short_name(self) -> str:
        """What ALLOW_REPLACE takes: the logical id without CDK's hash (DatasetBucket), or the stack."""
        if self.logical_id is None:
            return self.stack
        match = CDK_HASH.fullmatch(self.logical_id)
        return match["name"] if match else self.logical_id

    def allowed_by(self, names: set[str]) -> bool:
        accepted = {self.short_name, self.stack if self.logical_id is None else self.logical_id}
        if self.logical_id is not None:
            accepted.add(f"{self.stack}/{self.logical_id}")
        return bool(accepted & names)


def _label(change: ResourceChange) -> str:
    return f"{change.stack} {change.logical_id} ({change.resource_type})"


def _fate(resource: Template, policy: str) -> str:
    kept = resource.get(policy, "Delete")
    if kept in RETAINED:
        return "is retained outside the stack, unmanaged, and keeps billing"
    return "is deleted after a snapshot" if kept == "Snapshot" else "is DELETED"


# Names unique only within a parent (IAM: an inline policy's name within each role, user or group it is
# attached to; CloudWatch Logs: a metric filter's name within its log group): the parent is part of the name.
PARENT_PROPERTIES = {
    "AWS::IAM::Policy": ("Roles", "Users", "Groups"),
    "AWS::Logs::MetricFilter": ("LogGroupName",),
}


def _fixed_name(rules: ReplacementRules, resource: Template, stack: str) -> str | None:
    """The physical name a template gives a resource (canonical JSON), or None if CloudFormation names it.
    A name unique within a parent carries the parent; a parent given by reference is its stack's own."""
    properties = resource.get("Properties", {})
    for name_property in rules.name_properties(resource["Type"]):
        if name_property in properties:
            name = canonical(properties[name_property])
            parents = [properties.get(parent) for parent in PARENT_PROPERTIES.get(resource["Type"], ())]
            if not any(parents):
                return name
            referenced = "{" in canonical(parents)
            return f"{name} in {stack + ' ' if referenced else ''}{canonical(parents)}"
    return None


def _shown(name: str) -> str:
    return name.strip('"') if name.startswith('"') else name


class _Review:
    def __init__(self, old: App, new: App, rules: ReplacementRules) -> None:
        self.old, self.new, self.rules = old, new, rules
        self.changes = resource_changes(old, new, rules)
        self.by_address = {(change.stack, change.logical_id): change for change in self.changes}
        # (type, fixed name) -> where it lived before the deploy
        self.old_names = {
            (resource["Type"], name): (stack, logical_id)
            for stack, template in old.items()
            for logical_id, resource in template["Resources"].items()
            if (name := _fixed_name(rules, resource, stack)) is not None
        }

    def findings(self) -> list[Finding]:
        found: list[Finding] = []
        moved_to: set[tuple[str, str]] = set()
        for change in self.changes:
            if change.action == REPLACED:
                found += self._replaced(change)
            elif (
                change.action == REMOVED
                and change.stack in self.new
                and change.resource_type in STATEFUL_DATA
            ):
                finding, target = self._removed(change)
                found.append(finding)
                moved_to |= {target} if target else set()
        for change in self.changes:
            if change.action == ADDED and (change.stack, change.logical_id) not in moved_to:
                found += self._name_taken(change)
        found += self._association_conflicts()
        found += [self._stack_left(stack) for stack in sorted(set(self.old) - set(self.new))]
        found += self._skipped_stacks()
        return found

    def _skipped_stacks(self) -> list[Finding]:
        """Stacks whose template text stays the same while they read another stack's output that changes
        (weak cross-stack references, Fn::GetStackOutput): the CDK CLI skips deploying an unchanged
        template, so they keep the old value (a replaced file system's old id)."""
        found = []
        for stack in sorted(set(self.old) & set(self.new)):
            if canonical(self.old[stack]) != canonical(self.new[stack]):
                continue
            outputs = sorted(
                {
                    read
                    for change in self.changes
                    if change.stack == stack
                    for read in change.reads_changed_outputs
                }
            )
            if outputs:
                found.append(
                    Finding(
                        stack,
                        None,
                        f"{stack} reads {', '.join(outputs)}, which this deploy changes, but its own "
                        "template stays the same: `cdk deploy` skips an unchanged stack, so it keeps the old "
                        f"values until `cdk deploy --force {stack}` deploys it again.",
                    )
                )
        return found

    def _replaced(self, change: ResourceChange) -> list[Finding]:
        causes = ", ".join(change.causes)
        name = _fixed_name(self.rules, change.new, change.stack)
        if name is not None and name == _fixed_name(self.rules, change.old, change.stack):
            return [
                Finding(
                    change.stack,
                    change.logical_id,
                    f"{_label(change)} would be replaced by the change to {causes}, but it has a fixed name "
                    f"({_shown(name)}): CloudFormation cannot replace a custom-named resource, so the update "
                    "fails and rolls back.",
                )
            ]
        if change.resource_type not in STATEFUL_DATA:
            return []
        noun, data = STATEFUL_DATA[change.resource_type]
        fate = _fate(change.old, "UpdateReplacePolicy")
        return [
            Finding(
                change.stack,
                change.logical_id,
                f"{_label(change)} would be REPLACED by the change to {causes}: a new, empty {noun}; the old "
                f"one ({data}) {fate}.",
            )
        ]

    def _removed(self, change: ResourceChange) -> tuple[Finding, tuple[str, str] | None]:
        noun, data = STATEFUL_DATA[change.resource_type]
        fate = _fate(change.old, "DeletionPolicy")
        target = self._moved_to(change)
        if target is None:
            sentence = f"{_label(change)} would be REMOVED: it {fate}, with {data}."
            sentence += _kept_links_hint(change)
        else:
            name = _fixed_name(self.rules, change.old, change.stack)
            creation = (
                f"creating it fails because the old one still holds the name {_shown(name)}"
                if name is not None
                else f"CloudFormation creates a new, empty {noun} there"
            )
            sentence = (
                f"{_label(change)} would MOVE to {target[0]} {target[1]}, a new logical id: {creation}, and "
                f"the old one ({data}) {fate}."
            )
        return Finding(change.stack, change.logical_id, sentence), target

    def _moved_to(self, removed: ResourceChange) -> tuple[str, str] | None:
        """An added resource of the same type with the same fixed name, or else the same properties."""
        name = _fixed_name(self.rules, removed.old, removed.stack)
        for change in self.changes:
            if change.action != ADDED or change.resource_type != removed.resource_type:
                continue
            if (name is not None and name == _fixed_name(self.rules, change.new, change.stack)) or canonical(
                removed.old.get("Properties")
            ) == canonical(change.new.get("Properties")):
                return change.stack, change.logical_id
        return None

    def _name_taken(self, change: ResourceChange) -> list[Finding]:
        name = _fixed_name(self.rules, change.new, change.stack)
        holder = self.old_names.get((change.resource_type, name)) if name is not None else None
        if holder is None:
            return []
        return [
            Finding(
                change.stack,
                change.logical_id,
                f"{_label(change)} would be created with the fixed name {_shown(name)}, which {holder[0]} "
                f'{holder[1]} still holds: the deploy fails with "already exists".',
            )
        ]

    def _association_conflicts(self) -> list[Finding]:
        found = []
        for stack, template in self.new.items():
            created = [
                (logical_id, resource)
                for logical_id, resource in _associations(template)
                if self.by_address.get((stack, logical_id), _UNCHANGED).action in (ADDED, REPLACED)
            ]
            deployed = [(f"{other} (deployed)", link) for other, link in _associations(self.old.get(stack))]
            for index, (logical_id, resource) in enumerate(created):
                file_system = _file_system(resource)
                if self.by_address.get((stack, file_system), _UNCHANGED).action in (ADDED, REPLACED):
                    continue  # a new file system starts with no association
                others = deployed + [(f"{other} (new)", link) for other, link in created[index + 1 :]]
                reasons = [
                    conflict(_place(f"{logical_id} (new)", resource), _place(name, other))
                    for name, other in others
                    if _file_system(other) == file_system
                ]
                found += [_association_finding(stack, logical_id, reason) for reason in reasons if reason]
        return found

    def _stack_left(self, stack: str) -> Finding:
        resources = self.old[stack]["Resources"]
        stateful = [
            f"{logical_id} ({resource['Type']})"
            for logical_id, resource in sorted(resources.items())
            if resource["Type"] in STATEFUL_DATA
        ]
        held = f"; stateful: {', '.join(stateful)}" if stateful else ""
        return Finding(
            stack,
            None,
            f"{stack} is no longer in the app: `cdk deploy --all` leaves the stack deployed as it was, still "
            f"running and billing, with nothing updating it ({len(resources)} resource(s){held}).",
        )


@dataclass(frozen=True)
class _Unchanged:
    action: str = "unchanged"


_UNCHANGED = _Unchanged()


# Where release 0.5.0 linked every file system (the dataset at /dataset, the checkpoints at /checkpoints).
SPLIT_LINK_PATHS = ("/dataset", "/checkpoints")


def _kept_links_hint(change: ResourceChange) -> str:
    """How a deployment keeps the links release 0.5.0 made, where the deploy would remove one of them."""
    if change.resource_type != ASSOCIATION:
        return ""
    if change.old.get("Properties", {}).get("FileSystemPath") not in SPLIT_LINK_PATHS:
        return ""
    return (
        " A deployment linked by release 0.5.0 keeps its links with "
        "`migrations: {keep_split_fsx_links: true}` in its config (docs/upgrading.md)."
    )


def _association_finding(stack: str, logical_id: str, reason: str) -> Finding:
    return Finding(
        stack,
        logical_id,
        f"{stack} {logical_id} ({ASSOCIATION}) would be created while a conflicting association is still on "
        f"the file system (CloudFormation creates before it deletes), and FSx refuses it: {reason}; the "
        "stack's update fails and rolls back.",
    )


def _associations(template: Template | None):
    for logical_id, resource in sorted((template or {"Resources": {}})["Resources"].items()):
        if resource["Type"] == ASSOCIATION:
            yield logical_id, resource


def _file_system(association: Template) -> str | None:
    file_system = association.get("Properties", {}).get("FileSystemId")
    return file_system.get("Ref") if isinstance(file_system, dict) else file_system


def _place(name: str, association: Template) -> Association:
    properties = association.get("Properties", {})
    path, repository = properties.get("FileSystemPath", ""), properties.get("DataRepositoryPath", "")
    return Association(
        name,
        path if isinstance(path, str) else canonical(path),
        repository if isinstance(repository, str) else canonical(repository),
    )


def review(
    old: App, new: App, rules: ReplacementRules | None = None
) -> tuple[list[ResourceChange], list[Finding]]:
    """What deploying `new` over `old` changes, and the findings among those changes."""
    checked = _Review(old, new, rules or replacement_rules())
    return checked.changes, checked.findings()


def findings(old: App, new: App, rules: ReplacementRules | None = None) -> list[Finding]:
    return review(old, new, rules)[1]


def refused(found: list[Finding], allowed: set[str]) -> list[Finding]:
    """The findings that no name in `allowed` (ALLOW_REPLACE) covers."""
    return [finding for finding in found if not finding.allowed_by(allowed)]


def refusal(found: list[Finding]) -> str:
    """The last sentence of a refused deploy: the setting that lets each finding through."""
    names = ",".join(dict.fromkeys(finding.short_name for finding in found))
    return (
        f"The deploy is refused: to go ahead with these changes, name them: make deploy "
        f"ALLOW_REPLACE={names} (trainstack check-config --allow {names})."
    )
