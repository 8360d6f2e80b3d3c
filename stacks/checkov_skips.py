"""checkov findings the app accepts, each with its reason, written into the template metadata
(`Metadata.checkov.skip: [{id, comment}]`, checkov's own suppression format) like the cdk-nag
acknowledgements. `make lint` runs checkov over cdk.out; an unexplained finding fails it.

Per-resource skips are declared beside the resource (`skip_checkov`); project-wide decisions are applied
by `skip_project_wide_checks` to every resource they concern once the app is built.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_logs as logs
from constructs import IConstruct

# Resource type -> {check id: reason}, for decisions that hold for every resource of the type.
PROJECT_WIDE = {
    "AWS::Logs::LogGroup": {
        "CKV_AWS_158": "CloudWatch Logs encrypts log data at rest with AWS-managed keys; the app creates no "
        "customer KMS key (docs/infrastructure.md, Encryption).",
    },
    "AWS::ECR::Repository": {
        "CKV_AWS_136": "Images are encrypted at rest with AES-256 (ECR's default); no customer KMS key for "
        "ECR, in any compliance mode (docs/infrastructure.md, Encryption).",
    },
}
# CDK's own custom-resource handlers (run by CloudFormation during a deployment only).
DEPLOYMENT_HANDLER_PATHS = ("Custom::", "CustomCDKECRDeployment", "CDKECRDeployment")
DEPLOYMENT_HANDLER_SKIPS = {
    "CKV_AWS_115": "A CDK custom-resource handler: invoked by CloudFormation once per deployment, so a "
    "concurrency limit protects nothing.",
    "CKV_AWS_116": "A CDK custom-resource handler: CloudFormation reports its failure and rolls back; a dead "
    "letter queue would hold nothing to act on.",
    "CKV_AWS_117": "A CDK custom-resource handler calling AWS APIs only during deployment; it needs no VPC "
    "and the training VPC has no route for it.",
}


def skip_checkov(scope: IConstruct, skips: dict[str, str]) -> None:
    """Skip checkov checks on the CloudFormation resource of `scope`, saying why for each."""
    resource = scope if isinstance(scope, cdk.CfnResource) else scope.node.default_child
    if not isinstance(resource, cdk.CfnResource):
        raise TypeError(f"{scope.node.path} has no CloudFormation resource to annotate")
    existing = resource.get_metadata("checkov") or {"skip": []}
    for check_id, reason in skips.items():
        if not reason.strip():
            raise ValueError(f"skipping {check_id} needs a reason")
        existing["skip"].append({"id": check_id, "comment": reason})
    resource.add_metadata("checkov", existing)


def skip_project_wide_checks(app: cdk.App, *, governed: bool = False) -> None:
    """Apply PROJECT_WIDE (and the deployment-handler skips) to every resource of the built app. With
    compliance: control-tower handlers run in the VPC, and a log group with a KMS key (control-tower's or
    the run data key) is encrypted: those skips would be untrue and are left out.

    One walk from Python rather than an Aspect: an Aspect calls back from jsii's node process into Python
    for every construct during synth (~0.3 s of a 7 s `cdk synth`); every resource exists by now."""
    met_when_governed = {"CKV_AWS_117"}
    for node in app.node.find_all():
        if not isinstance(node, cdk.CfnResource):
            continue
        resource_type = node.cfn_resource_type
        skips = dict(PROJECT_WIDE.get(resource_type, {}))
        if resource_type == "AWS::Lambda::Function" and any(
            part in node.node.path for part in DEPLOYMENT_HANDLER_PATHS
        ):
            skips.update(DEPLOYMENT_HANDLER_SKIPS)
        if governed:
            skips = {check: reason for check, reason in skips.items() if check not in met_when_governed}
        if isinstance(node, logs.CfnLogGroup) and node.kms_key_id is not None:
            # Encrypted with a customer key: the run data key (stacks/run_data_key.py) or control-tower's.
            skips.pop("CKV_AWS_158", None)
        if skips:
            skip_checkov(node, skips)
