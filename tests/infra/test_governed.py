"""Deploying into a governed account: compliance: control-tower passes every AWS Control Tower proactive
control, every role carries the boundary and the path, the stacks use the configured bootstrap, and the
cost the README and `make synth` state is what the templates hold."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from stacks.control_tower_rules import RESOURCE_TYPE, ControlTowerRules, types_of_rules
from tests.conftest import CDK_CONTEXT, NO_ENV, deep_merge, default_config_data, synthesize
from tests.infra.control_tower import failed_rules, unpack_rules
from tests.infra.templates import resources
from tests.infra.test_app_quality import LINT_PLUGINS, run_cfn_lint, validation_report

BOUNDARY = "arn:aws:iam::111111111111:policy/PlatformBoundary"
GOVERNED = {
    "compliance": "control-tower",
    "access_logs_bucket": "org-s3-access-logs-111111111111",
    "iam": {"permissions_boundary": BOUNDARY, "role_path": "/trainstack/"},
    "bootstrap_qualifier": "mlplatform",
}
CFN_GUARD_PLUGIN = "cdk-validator-cfnguard"
# What the default config's templates fail, on purpose: compliance: none keeps SSE-S3 buckets, an access-log
# bucket of its own, three months of logs with AWS-managed encryption and handlers outside the VPC
# (README, "Deploying into a governed account"). A new failure here is a regression of the default mode.
DEFAULT_MODE_FAILURES = {
    "trainstack-network.template.json": {
        "cloudwatch_log_group_encrypted_check",
        "cloudwatch_log_group_retention_period_check",
        "lambda_inside_vpc_check",
    },
    "trainstack-storage.template.json": {
        "s3_bucket_default_encryption_kms_check",
        "s3_bucket_logging_enabled_check",
        "s3_bucket_object_lock_enabled_check",
        "s3_bucket_versioning_enabled_check",
        "s3_event_notifications_enabled_check",
    },
    "trainstack-image.template.json": {"cloudwatch_log_group_encrypted_check", "lambda_inside_vpc_check"},
    "trainstack-pipeline.template.json": {
        "cloudwatch_log_group_encrypted_check",
        "cloudwatch_log_group_retention_period_check",
    },
}


def governed_settings(overrides: dict | None = None):
    from trainstack.config_loading import parse_settings

    return parse_settings(
        deep_merge(deep_merge(default_config_data(), GOVERNED), overrides or {}), NO_ENV, source="governed"
    )


@pytest.fixture(scope="session")
def governed_app(synthesized_directory):
    """The whole app with compliance: control-tower, a boundary, a role path and a qualifier; synth itself
    runs the Control Tower rules (the plugin, which test_a_removed_fix_fails_synth_naming_the_rule shows
    failing) and cdk-nag, and fails on any open finding. (settings, the cloud assembly read back from the
    directory: the same settings as tests/checkpoint_store_modes.py's store-sagemaker-sync-control-tower,
    synthesized once for both.)"""
    from aws_cdk import cx_api

    settings = governed_settings()
    return settings, cx_api.CloudAssembly(str(synthesized_directory(settings)))


@pytest.fixture(scope="session")
def control_tower(tmp_path_factory):
    return unpack_rules(tmp_path_factory.mktemp("control-tower"))


def templates_of(assembly) -> list[Path]:
    return sorted(Path(assembly.directory).glob("*.template.json"))


def test_governed_templates_pass_every_control_tower_rule(governed_app, control_tower):
    _, assembly = governed_app
    failures = failed_rules(*control_tower, templates_of(assembly))
    assert len(failures) == 4 and all(rules == set() for rules in failures.values()), failures


def test_default_templates_fail_exactly_the_known_control_tower_rules(default_app, control_tower):
    """With every rule, and with the rules that name the templates' resource types (what the other checks
    run): the same failures."""
    _, _, assembly = default_app
    assert failed_rules(*control_tower, templates_of(assembly), every_rule=True) == DEFAULT_MODE_FAILURES
    assert failed_rules(*control_tower, templates_of(assembly)) == DEFAULT_MODE_FAILURES


def test_every_control_tower_rule_skips_a_template_without_the_types_it_names(control_tower):
    """What rules_for relies on, as each rule file's specification states it: scenario 1 is a SKIP for a
    document that holds none of the resource types the rule reports on."""
    _, rules = control_tower
    files = sorted((rules / "cfn-guard").rglob("*.guard"))
    assert len(files) > 200
    # Synth reads the same rules from the same bundle, each with the types it names.
    named = {name: bool(types) for name, types in types_of_rules().items()}
    assert named == {path.stem: True for path in files}
    for path in files:
        text = path.read_text()
        reports_on = re.search(r"# Reports on:\n((?:#\s+AWS::.*\n)+)", text)
        first = re.search(r"Scenario:? 1\W*\n(.*?)Scenario:? 2", text, re.DOTALL)  # the files' spellings vary
        assert reports_on and RESOURCE_TYPE.findall(reports_on[1]), path.name
        assert first and "does not contain" in first[1] and "Then: SKIP" in first[1], path.name


def test_a_removed_fix_fails_synth_naming_the_rule(tmp_path):
    """The network stack alone, governed, with the flow logs' KMS key taken away again: synth stops and the
    report names CT.CLOUDWATCH.PR.3's rule."""
    import aws_cdk as cdk

    from stacks.app_builder import network_stack
    from stacks.governed_account import apply_governance

    settings = governed_settings()
    app = cdk.App(outdir=str(tmp_path), context=CDK_CONTEXT)
    env = cdk.Environment(account=settings.account, region=settings.region)
    network = network_stack(app, settings, env=env)
    apply_governance([network], settings.iam, governed=True)
    network.node.find_child("FlowLogGroup").node.default_child.add_property_deletion_override("KmsKeyId")
    cdk.Validations.of(app).add_plugins(ControlTowerRules(waived=[]))
    with pytest.raises(Exception, match="ValidationFailed"):
        app.synth()
    [plugin] = [
        report
        for report in validation_report(tmp_path)["pluginReports"]
        if report["pluginName"] == CFN_GUARD_PLUGIN
    ]
    assert {violation["ruleName"] for violation in plugin["violations"]} == {
        "cloudwatch_log_group_encrypted_check"
    }


def test_a_template_no_rule_can_judge_still_goes_through_every_rule(tmp_path):
    """Where no rule names a type the templates hold, synth runs every rule (each skips), as the plugin alone
    does: cfn-guard given no rule at all fails synth."""
    import aws_cdk as cdk

    assert not any("AWS::CloudFormation::WaitConditionHandle" in types for types in types_of_rules().values())
    app = cdk.App(outdir=str(tmp_path), context=CDK_CONTEXT)
    cdk.CfnWaitConditionHandle(cdk.Stack(app, "Bare"), "Handle")
    cdk.Validations.of(app).add_plugins(ControlTowerRules(waived=[]))
    app.synth()


def test_every_role_has_the_boundary_and_the_path(governed_app):
    _, assembly = governed_app
    roles = {
        (template.name, name): body["Properties"]
        for template in templates_of(assembly)
        for name, body in resources(json.loads(template.read_text()), "AWS::IAM::Role").items()
    }
    assert any("CustomResourceProvider" in name for _, name in roles)  # CDK's own helpers are included
    assert len(roles) >= 8
    for where, properties in roles.items():
        assert properties.get("PermissionsBoundary") == BOUNDARY, where
        assert properties.get("Path") == "/trainstack/", where


def test_stacks_deploy_with_the_qualifiers_bootstrap(governed_app):
    _, assembly = governed_app
    assert len(assembly.stacks) == 4
    for artifact in assembly.stacks:
        assert ":role/cdk-mlplatform-deploy-role-" in artifact.assume_role_arn
        assert ":role/cdk-mlplatform-cfn-exec-role-" in artifact.cloud_formation_execution_role_arn
        assert artifact.bootstrap_stack_version_ssm_parameter == "/cdk-bootstrap/mlplatform/version"
    assert "hnb659fds" not in json.dumps([json.loads(path.read_text()) for path in templates_of(assembly)])


def test_governed_templates_pass_cfn_lint_and_cdk_nag(governed_app):
    _, assembly = governed_app
    result = run_cfn_lint(templates_of(assembly))
    assert (result.returncode, result.stdout + result.stderr) == (0, "")
    for plugin in validation_report(Path(assembly.directory))["pluginReports"]:
        if plugin["pluginName"] in LINT_PLUGINS:
            assert plugin["violations"] == [], plugin["pluginName"]
        for suppressed in plugin.get("suppressedViolations", []):
            assert suppressed["reason"].strip(), suppressed["ruleName"]


def test_the_stated_cost_counts_what_the_templates_add(governed_app, default_app):
    """governed_fixed_costs (README's table, `make synth`'s line) against the resources control-tower adds."""
    from trainstack.governance_costs import governed_fixed_costs
    from trainstack.idle_cost import count_in_templates
    from trainstack.idle_resources import billed_resources

    def count(assembly, resource_type: str, **properties) -> int:
        return sum(
            1
            for template in templates_of(assembly)
            for body in resources(json.loads(template.read_text()), resource_type).values()
            if all(body["Properties"].get(key) == value for key, value in properties.items())
        )

    settings, governed_assembly = governed_app
    _, _, default_assembly = default_app
    items = governed_fixed_costs(settings)
    stated_keys = sum(item.count for item in items if "KMS key" in item.what)
    stated_endpoints = sum(item.count for item in items if "endpoint" in item.what)
    added_keys = count(governed_assembly, "AWS::KMS::Key") - count(default_assembly, "AWS::KMS::Key")
    added_endpoints = count(governed_assembly, "AWS::EC2::VPCEndpoint", VpcEndpointType="Interface") - count(
        default_assembly, "AWS::EC2::VPCEndpoint", VpcEndpointType="Interface"
    )
    assert (stated_keys, stated_endpoints) == (added_keys, added_endpoints) == (4, 1)
    # check-config's idle cost counts what the governed templates hold (tests/cost/ for the other configs).
    governed_templates = [json.loads(template.read_text()) for template in templates_of(governed_assembly)]
    assert billed_resources(settings) == count_in_templates(governed_templates)


# An existing VPC with a NAT, no FSx, queue mode: the copy function takes the configured subnet, no
# endpoint is added, and Batch's resources pass too.
GOVERNED_QUEUE_EXISTING_NAT = {
    "network": {
        "egress": "nat",
        "existing": {
            "vpc_id": "vpc-0a1b2c3d4e5f60718",
            "vpc_cidr": "10.50.0.0/16",
            "subnet_ids": ["subnet-0a1b2c3d4e5f60718"],
            "route_table_ids": ["rtb-0a1b2c3d4e5f60718"],
        },
    },
    "fsx": {"enabled": False, "throughput_mbps": None},
    "queue": {"enabled": True, "shares": {"teamA": 2, "teamB": 1}},
}


def test_governed_variant_passes_and_costs_what_it_adds(tmp_path, control_tower):
    from trainstack.governance_costs import governed_fixed_costs
    from trainstack.idle_cost import count_in_templates
    from trainstack.idle_resources import billed_resources

    settings = governed_settings(GOVERNED_QUEUE_EXISTING_NAT)
    _, assembly = synthesize(settings, tmp_path)
    templates = templates_of(assembly)
    assert all(rules == set() for rules in failed_rules(*control_tower, templates).values())
    result = run_cfn_lint(templates)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")
    bodies = [
        body for template in templates for body in json.loads(template.read_text())["Resources"].values()
    ]
    [copy_function] = [body for body in bodies if body["Type"] == "AWS::Lambda::Function"]
    assert copy_function["Properties"]["VpcConfig"]["SubnetIds"] == ["subnet-0a1b2c3d4e5f60718"]
    items = {item.what: item.count for item in governed_fixed_costs(settings)}
    templates_read = [json.loads(template.read_text()) for template in templates]
    assert billed_resources(settings) == count_in_templates(templates_read)  # check-config's idle cost
    keys = sum(1 for body in bodies if body["Type"] == "AWS::KMS::Key")
    # Every mode has the notification topic's key; control-tower adds buckets', image's and pipeline's.
    assert sum(count for what, count in items.items() if "KMS key" in what) == keys - 1 == 3
    assert not any("endpoint" in what for what in items)


def test_no_checkov_skip_of_what_the_governed_templates_meet(governed_app):
    """Log groups have a KMS key and handlers run in the VPC: skipping checkov's checks of those would
    leave an untrue reason in the template."""
    _, assembly = governed_app
    skipped = {
        skip["id"]
        for template in templates_of(assembly)
        for body in json.loads(template.read_text())["Resources"].values()
        for skip in body.get("Metadata", {}).get("checkov", {}).get("skip", [])
    }
    assert skipped and not skipped & {"CKV_AWS_158", "CKV_AWS_117"}


def test_an_existing_access_log_bucket_replaces_the_created_one_in_any_mode(tmp_path):
    from tests.infra.conftest import settings_with, synthesize_infra

    infra = synthesize_infra(settings_with({"access_logs_bucket": "org-s3-access-logs"}), tmp_path)
    buckets = resources(infra.storage_template, "AWS::S3::Bucket")
    assert sorted(name[: -len("ABCDEF12")] for name in buckets) == [
        "ArtifactBucket",
        "CheckpointBucket",
        "DatasetBucket",
    ]
    for body in buckets.values():
        logging = body["Properties"]["LoggingConfiguration"]
        assert logging["DestinationBucketName"] == "org-s3-access-logs"
    assert infra.storage_template["Outputs"]["AccessLogBucketName"]["Value"] == "org-s3-access-logs"
