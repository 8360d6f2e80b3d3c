"""The synthesized app as it would stand deployed: every intrinsic resolved to a concrete value (names and
ARNs CloudFormation would generate, in the config's account and Region); each role with its policies.

Physical names of resources without an explicit name follow CloudFormation's own scheme closely enough for
matching (`<stack>-<logical id>`); what matters for IAM is that a policy and the call it allows name the same
resource, and both are resolved here from the same template value."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from tests.infra.templates import load_templates

# Service of an ARN by CloudFormation type prefix, for GetAtt Arn of types without a rule of their own.
_SERVICE = {
    "AWS::Events::": "events",
    "AWS::Lambda::": "lambda",
    "AWS::SNS::": "sns",
    "AWS::Batch::": "batch",
}
# AWS managed policies the templates attach, as AWS publishes them (AWS Managed Policy Reference:
# AWSLambdaBasicExecutionRole v1, AWSLambdaVPCAccessExecutionRole v3).
AWS_MANAGED_POLICIES = {
    "service-role/AWSLambdaBasicExecutionRole": [
        {
            "Effect": "Allow",
            "Action": ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"],
            "Resource": "*",
        }
    ],
    "service-role/AWSLambdaVPCAccessExecutionRole": [
        {
            "Effect": "Allow",
            "Action": [
                "logs:CreateLogGroup",
                "logs:CreateLogStream",
                "logs:PutLogEvents",
                "ec2:CreateNetworkInterface",
                "ec2:DescribeNetworkInterfaces",
                "ec2:DescribeSubnets",
                "ec2:DeleteNetworkInterface",
                "ec2:AssignPrivateIpAddresses",
                "ec2:UnassignPrivateIpAddresses",
            ],
            "Resource": "*",
        }
    ],
}


@dataclass
class Role:
    """One IAM role: its ARN (path included) and the policies IAM evaluates for its calls."""

    stack: str
    logical_id: str
    arn: str
    service: str  # the service principal that assumes it
    policies: list[dict[str, Any]] = field(default_factory=list)  # {"name", "policy"}
    boundary: str | None = None  # managed policy ARN


class DeployedApp:
    def __init__(self, outdir: str | Path, account: str, region: str):
        self.templates = load_templates(outdir)
        self.account, self.region = account, region
        self.pseudo = {
            "AWS::Partition": "aws",
            "AWS::Region": region,
            "AWS::AccountId": account,
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::NoValue": None,
        }

    # --- resolving -------------------------------------------------------------------------------------

    def resolve(self, value: Any, stack: str) -> Any:
        if isinstance(value, list):
            return [self.resolve(item, stack) for item in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            [(key, argument)] = value.items()
            if key == "Ref":
                return self._ref(stack, argument)
            if key == "Fn::GetAtt":
                name, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
                return self._attribute(stack, name, attribute)
            if key == "Fn::Join":
                separator, parts = argument
                return separator.join(str(part) for part in self.resolve(parts, stack))
            if key == "Fn::Select":
                index, items = argument
                return self.resolve(items, stack)[int(self.resolve(index, stack))]
            if key == "Fn::Split":
                separator, text = argument
                return self.resolve(text, stack).split(separator)
            if key == "Fn::Sub":
                return self._sub(stack, argument)
            if key == "Fn::GetStackOutput":
                producer = argument["StackName"]
                output = self.templates[producer]["Outputs"][argument["OutputName"]]["Value"]
                return self.resolve(output, producer)
            if key == "Fn::ImportValue":
                return self._import(argument)
        return {key: self.resolve(item, stack) for key, item in value.items()}

    def _sub(self, stack: str, argument: Any) -> str:
        text, variables = (argument, {}) if isinstance(argument, str) else argument
        variables = {name: self.resolve(item, stack) for name, item in variables.items()}

        def replace(match: re.Match) -> str:
            name = match.group(1)
            if name in variables:
                return str(variables[name])
            if "." in name:
                return str(self._attribute(stack, *name.split(".", 1)))
            return str(self._ref(stack, name))

        return re.sub(r"\$\{([^}!]+)\}", replace, text)

    def _import(self, export: str) -> Any:
        for stack, template in self.templates.items():
            for output in template.get("Outputs", {}).values():
                if output.get("Export", {}).get("Name") == export:
                    return self.resolve(output["Value"], stack)
        raise KeyError(f"no stack exports {export}")

    def resource(self, stack: str, logical_id: str) -> dict[str, Any]:
        return self.templates[stack]["Resources"][logical_id]

    def _name(self, stack: str, logical_id: str, name_property: str | None) -> str:
        properties = self.resource(stack, logical_id).get("Properties", {})
        if name_property and name_property in properties:
            return self.resolve(properties[name_property], stack)
        return f"{stack}-{logical_id}"

    def _ref(self, stack: str, name: str) -> Any:
        if name in self.pseudo:
            return self.pseudo[name]
        if name == "AWS::StackId":  # CloudFormation's form; the id part is random per stack
            return f"arn:aws:cloudformation:{self.region}:{self.account}:stack/{stack}/00000000-0000"
        template = self.templates[stack]
        if name in template.get("Parameters", {}):
            return template["Parameters"][name].get("Default", f"{name}-value")
        kind = self.resource(stack, name)["Type"]
        lower = f"{stack}-{name}".lower()
        arn = f"arn:aws:%s:{self.region}:{self.account}:%s"
        refs = {
            "AWS::IAM::Role": lambda: self._name(stack, name, "RoleName"),
            "AWS::IAM::ManagedPolicy": lambda: self._attribute(stack, name, "PolicyArn"),
            "AWS::S3::Bucket": lambda: self._name(stack, name, "BucketName").lower(),
            # AWS::S3Express::DirectoryBucket's return values (template reference): Ref the name, Arn below.
            "AWS::S3Express::DirectoryBucket": lambda: self._name(stack, name, "BucketName"),
            "AWS::StepFunctions::StateMachine": lambda: (
                arn % ("states", "stateMachine:" + self._name(stack, name, "StateMachineName"))
            ),
            # Ref of a version: its ARN, `<state machine ARN>:<number>` (template reference); 1 when first
            # deployed.
            "AWS::StepFunctions::StateMachineVersion": lambda: (
                self.resolve(self.resource(stack, name)["Properties"]["StateMachineArn"], stack) + ":1"
            ),
            "AWS::ECR::Repository": lambda: self._name(stack, name, "RepositoryName").lower(),
            "AWS::Logs::LogGroup": lambda: self._name(stack, name, "LogGroupName"),
            "AWS::Lambda::Function": lambda: self._name(stack, name, "FunctionName"),
            "AWS::DynamoDB::Table": lambda: self._name(stack, name, "TableName"),
            "AWS::SNS::Topic": lambda: arn % ("sns", self._name(stack, name, "TopicName")),
            "AWS::KMS::Key": lambda: f"{name.lower()}-0000-0000-0000-000000000000"[:36],
            "AWS::Batch::JobQueue": lambda: (
                arn % ("batch", "job-queue/" + self._name(stack, name, "JobQueueName"))
            ),
            "AWS::Batch::ServiceEnvironment": lambda: (
                arn % ("batch", "service-environment/" + self._name(stack, name, "ServiceEnvironmentName"))
            ),
            "AWS::Batch::SchedulingPolicy": lambda: (
                arn % ("batch", "scheduling-policy/" + self._name(stack, name, "Name"))
            ),
            "AWS::EC2::VPC": lambda: f"vpc-{_hex(lower)}",
            "AWS::EC2::Subnet": lambda: f"subnet-{_hex(lower)}",
            "AWS::EC2::SecurityGroup": lambda: f"sg-{_hex(lower)}",
            "AWS::FSx::FileSystem": lambda: f"fs-{_hex(lower)}",
            "AWS::SSM::Parameter": lambda: self._name(stack, name, "Name"),
        }
        return refs[kind]() if kind in refs else lower

    def _attribute(self, stack: str, name: str, attribute: str) -> Any:
        kind = self.resource(stack, name)["Type"]
        properties = self.resource(stack, name).get("Properties", {})
        ref = self._ref(stack, name)
        region_arn = f"arn:aws:%s:{self.region}:{self.account}:%s"
        attributes = {
            ("AWS::IAM::Role", "Arn"): lambda: (
                f"arn:aws:iam::{self.account}:role{self.resolve(properties.get('Path', '/'), stack)}{ref}"
            ),
            ("AWS::S3::Bucket", "Arn"): lambda: f"arn:aws:s3:::{ref}",
            ("AWS::S3Express::DirectoryBucket", "Arn"): lambda: region_arn % ("s3express", f"bucket/{ref}"),
            ("AWS::ECR::Repository", "Arn"): lambda: region_arn % ("ecr", f"repository/{ref}"),
            ("AWS::ECR::Repository", "RepositoryUri"): lambda: (
                f"{self.account}.dkr.ecr.{self.region}.amazonaws.com/{ref}"
            ),
            ("AWS::Logs::LogGroup", "Arn"): lambda: region_arn % ("logs", f"log-group:{ref}:*"),
            ("AWS::KMS::Key", "Arn"): lambda: region_arn % ("kms", f"key/{ref}"),
            ("AWS::StepFunctions::StateMachine", "Name"): lambda: ref.rsplit(":", 1)[1],
            ("AWS::StepFunctions::StateMachine", "Arn"): lambda: ref,
            ("AWS::Lambda::Function", "Arn"): lambda: region_arn % ("lambda", f"function:{ref}"),
            ("AWS::EC2::SecurityGroup", "GroupId"): lambda: ref,
            ("AWS::EC2::VPC", "DefaultSecurityGroup"): lambda: f"sg-{_hex(ref + 'default')}",
            ("AWS::FSx::FileSystem", "LustreMountName"): lambda: "abcdefgh",
            ("AWS::Batch::JobQueue", "JobQueueArn"): lambda: ref,
            ("AWS::DynamoDB::Table", "Arn"): lambda: region_arn % ("dynamodb", f"table/{ref}"),
            ("AWS::Events::Rule", "Arn"): lambda: region_arn % ("events", f"rule/{ref}"),
        }
        if (kind, attribute) in attributes:
            return attributes[(kind, attribute)]()
        if attribute.endswith("Arn") and ref.startswith("arn:"):
            return ref
        service = next((service for prefix, service in _SERVICE.items() if kind.startswith(prefix)), "x")
        return region_arn % (service, f"{attribute.lower()}/{ref}")

    # --- what IAM evaluates ----------------------------------------------------------------------------

    @cached_property
    def roles(self) -> dict[str, Role]:
        """Every role of every stack by '<stack>/<logical id>', with inline, attached and managed policies."""
        roles: dict[str, Role] = {}
        for stack, template in self.templates.items():
            for logical_id, body in template["Resources"].items():
                if body["Type"] != "AWS::IAM::Role":
                    continue
                properties = self.resolve(body["Properties"], stack)
                [statement, *_] = properties["AssumeRolePolicyDocument"]["Statement"]
                role = Role(
                    stack,
                    logical_id,
                    self._attribute(stack, logical_id, "Arn"),
                    statement["Principal"].get("Service", ""),
                    boundary=properties.get("PermissionsBoundary"),
                )
                role.policies += [
                    {"name": inline["PolicyName"], "policy": inline["PolicyDocument"]}
                    for inline in properties.get("Policies", [])
                ]
                for arn in properties.get("ManagedPolicyArns", []):
                    role.policies.append({"name": arn, "policy": self.managed_policy(arn)})
                roles[f"{stack}/{logical_id}"] = role
        for stack, template in self.templates.items():
            for logical_id, body in template["Resources"].items():
                if body["Type"] not in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
                    continue
                properties = body["Properties"]
                document = self.resolve(properties["PolicyDocument"], stack)
                for reference in properties.get("Roles", []):
                    if not isinstance(reference, dict):
                        continue  # a role of the account by name (a team's principals): not in a template
                    role = roles[f"{stack}/{reference['Ref']}"]
                    role.policies.append({"name": logical_id, "policy": document})
        return roles

    def managed_policy(self, arn: str) -> dict[str, Any]:
        """An attached managed policy's document: AWS's (AWS_MANAGED_POLICIES) or one in a template."""
        prefix = "arn:aws:iam::aws:policy/"
        if arn.startswith(prefix):
            return {"Version": "2012-10-17", "Statement": AWS_MANAGED_POLICIES[arn.removeprefix(prefix)]}
        for stack, template in self.templates.items():
            for logical_id, body in template["Resources"].items():
                if body["Type"] == "AWS::IAM::ManagedPolicy" and self._ref(stack, logical_id) == arn:
                    return self.resolve(body["Properties"]["PolicyDocument"], stack)
        raise KeyError(f"managed policy {arn} is neither AWS's (AWS_MANAGED_POLICIES) nor in a template")

    def role_by_arn(self, arn: str) -> Role:
        [role] = [role for role in self.roles.values() if role.arn == arn]
        return role

    def resources_of_type(self, resource_type: str) -> list[tuple[str, str, dict[str, Any]]]:
        """(stack, logical id, resolved properties) of every resource of a type."""
        return [
            (stack, logical_id, self.resolve(body.get("Properties", {}), stack))
            for stack, template in self.templates.items()
            for logical_id, body in template["Resources"].items()
            if body["Type"] == resource_type
        ]

    @cached_property
    def bucket_policies(self) -> dict[str, dict[str, Any]]:
        """Bucket name -> its bucket policy, as deployed."""
        return {
            properties["Bucket"]: properties["PolicyDocument"]
            for _, _, properties in self.resources_of_type("AWS::S3::BucketPolicy")
        }

    @cached_property
    def key_policies(self) -> dict[str, dict[str, Any]]:
        """KMS key ARN -> its key policy, as deployed."""
        return {
            self._attribute(stack, logical_id, "Arn"): properties["KeyPolicy"]
            for stack, logical_id, properties in self.resources_of_type("AWS::KMS::Key")
        }

    def state_machines(self) -> dict[str, tuple[dict[str, Any], Role]]:
        """State machine name -> (its definition with substitutions applied, its role)."""
        machines = {}
        for stack, logical_id, properties in self.resources_of_type("AWS::StepFunctions::StateMachine"):
            text = properties["DefinitionString"]
            for name, value in properties.get("DefinitionSubstitutions", {}).items():
                text = text.replace("${" + name + "}", str(value))
            name = self._attribute(stack, logical_id, "Name")
            machines[name] = (json.loads(text), self.role_by_arn(properties["RoleArn"]))
        return machines


def _hex(text: str) -> str:
    """17 stable hex digits standing for an EC2/FSx id generated at deploy time."""
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:17]
