"""Quality bars over synthesized templates: cfn-lint clean, cdk-nag AwsSolutions clean or acknowledged with a
reason, and one snapshot per infrastructure stack."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from tests.conftest import CDK_CONTEXT, REPO_ROOT
from tests.infra.conftest import InfraApp
from tests.infra.templates import mask_asset_hashes

CFN_LINT = Path(sys.executable).parent / "cfn-lint"
# Validation plugins whose findings must be fixed or acknowledged; "Construct Annotations" carries messages.
LINT_PLUGINS = {"AwsSolutions", "CloudFormation Validate"}
VARIANTS = ["default_infra", "az_id_nat_scratch", "imported_vpc_persistent_500", "imported_vpc_nat_no_fsx"]


@pytest.fixture
def json_snapshot(snapshot):
    return snapshot.with_defaults(extension_class=JSONSnapshotExtension)


def run_cfn_lint(templates: list[Path]) -> subprocess.CompletedProcess[str]:
    # From the repo root so that .cfnlintrc.yaml applies, as in `make lint`.
    return subprocess.run(
        [str(CFN_LINT), *map(str, templates)], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )


def validation_report(outdir: Path) -> dict:
    """The validation plugins' report (cdk-nag 3, CloudFormation Validate), written next to the templates."""
    path = outdir / "validation-report.json"
    return json.loads(path.read_text()) if path.exists() else {"pluginReports": []}


def test_every_template_of_the_app_passes_cfn_lint(default_app):
    _, _, assembly = default_app
    templates = sorted(Path(assembly.directory).glob("*.template.json"))
    assert len(templates) == 4  # network, storage, image, pipeline
    result = run_cfn_lint(templates)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_config_variants_pass_cfn_lint(request):
    # One cfn-lint run for all variants: its start-up (loading the resource schemas) is most of its time.
    templates = [
        template
        for variant in VARIANTS[1:]
        for template in sorted(request.getfixturevalue(variant).outdir.glob("*.template.json"))
    ]
    result = run_cfn_lint(templates)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_cfn_lint_would_report_a_warning(tmp_path):
    """The lint check above can fail: an unused parameter is a cfn-lint warning (W2001)."""
    template = {
        "Parameters": {"Unused": {"Type": "String"}},
        "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
    }
    path = tmp_path / "probe.template.json"
    path.write_text(json.dumps(template))
    result = run_cfn_lint([path])
    assert result.returncode != 0 and "W2001" in result.stdout


@pytest.mark.parametrize("variant", VARIANTS)
def test_no_unacknowledged_finding_and_every_acknowledgment_has_a_reason(variant: str, request):
    """Synth already failed on any open AwsSolutions (cdk-nag) or CloudFormation Validate error; the report
    must also hold no open warning of theirs, and every suppression in it a reason."""
    infra: InfraApp = request.getfixturevalue(variant)
    for plugin in validation_report(infra.outdir)["pluginReports"]:
        if plugin["pluginName"] in LINT_PLUGINS:
            assert plugin["violations"] == [], plugin["pluginName"]
        for suppressed in plugin.get("suppressedViolations", []):
            assert suppressed["reason"].strip(), suppressed["ruleName"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_network_and_storage_raise_no_construct_warning(variant: str, request):
    """Other stacks may warn the user on purpose (e.g. a setting still to fill in); these two never do."""
    infra: InfraApp = request.getfixturevalue(variant)
    ours = (f"{infra.network.stack_name}/", f"{infra.storage.stack_name}/")
    warned = [
        (violation["ruleName"], construct["constructPath"])
        for plugin in validation_report(infra.outdir)["pluginReports"]
        for violation in plugin["violations"]
        for construct in violation["violatingConstructs"]
        if construct["constructPath"].startswith(ours)
    ]
    assert warned == []


def test_every_acknowledgment_in_the_app_has_a_reason(default_app):
    import aws_cdk as cdk

    _, stacks, _ = default_app
    key = cdk.Validations.ACKNOWLEDGED_RULES_METADATA_KEY
    acknowledgments = {
        (construct.node.path, rule): reason
        for construct in stacks.network.node.root.node.find_all()
        for entry in construct.node.metadata
        if entry.type == key
        for rule, reason in entry.data.items()
    }
    assert acknowledgments  # the pinned AZ at least
    assert all(str(reason).strip() for reason in acknowledgments.values()), acknowledgments


def test_an_unacknowledged_nag_finding_fails_synth(tmp_path):
    """The check above relies on this: with the AwsSolutions plugin, an open finding stops synth."""
    import aws_cdk as cdk
    from aws_cdk import aws_s3 as s3
    from cdk_nag import AwsSolutionsChecks

    app = cdk.App(outdir=str(tmp_path), context=CDK_CONTEXT)
    s3.Bucket(cdk.Stack(app, "Probe"), "PlainBucket")
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    with pytest.raises(Exception, match="ValidationFailed"):
        app.synth()
    [nag] = [
        plugin
        for plugin in validation_report(tmp_path)["pluginReports"]
        if plugin["pluginName"] == "AwsSolutions"
    ]
    assert {"AwsSolutions-S1", "AwsSolutions-S10"} <= {
        violation["ruleName"] for violation in nag["violations"]
    }


@pytest.mark.parametrize("stack", ["network", "storage"])
def test_template_snapshot(stack: str, default_infra: InfraApp, json_snapshot):
    template = getattr(default_infra, f"{stack}_template")
    assert mask_asset_hashes(template) == json_snapshot
