"""The two-team example passes the same bars as every other mode: cfn-lint, cdk-nag, the IAM grants against
the Service Authorization Reference, and, with compliance: control-tower, AWS Control Tower's proactive
controls (synth runs them and fails on an open finding; they are checked here once more by cfn-guard)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import NO_ENV, TEAMS_CONFIG, deep_merge, synthesize
from tests.iam import sar
from tests.infra.control_tower import failed_rules, unpack_rules
from tests.infra.templates import load_templates
from tests.infra.test_app_quality import LINT_PLUGINS, run_cfn_lint, validation_report
from tests.infra.test_governed import GOVERNED

DIRECTORY_BUCKET = "AWS::S3Express::DirectoryBucket"


@pytest.fixture(scope="module")
def governed_teams(tmp_path_factory):
    from trainstack.config_loading import parse_settings

    data = deep_merge(yaml.safe_load(TEAMS_CONFIG.read_text()), GOVERNED)
    settings = parse_settings(data, NO_ENV, source="governed teams")
    _, assembly = synthesize(settings, tmp_path_factory.mktemp("governed-teams.cdk.out"))
    return settings, Path(assembly.directory)


def outdirs(teams_app, governed_teams) -> dict[str, tuple[object, Path]]:
    settings, _, assembly = teams_app
    return {"teams": (settings, Path(assembly.directory)), "control-tower teams": governed_teams}


def test_teams_templates_pass_cfn_lint_and_cdk_nag_in_both_governance_modes(teams_app, governed_teams):
    templates = []
    for _, outdir in outdirs(teams_app, governed_teams).values():
        templates += sorted(outdir.glob("*.template.json"))
        for plugin in validation_report(outdir)["pluginReports"]:
            if plugin["pluginName"] in LINT_PLUGINS:
                assert plugin["violations"] == [], plugin["pluginName"]
    assert len(templates) == 12  # network, storage, image, queue and one pipeline per team, twice
    result = run_cfn_lint(templates)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_teams_grants_match_the_service_authorization_reference(teams_app, governed_teams):
    for mode, (settings, outdir) in outdirs(teams_app, governed_teams).items():
        found = sorted(
            str(finding) for finding in sar.check(load_templates(outdir), settings.region, settings.account)
        )
        assert found == [], f"{mode}: {len(found)} finding(s)\n" + "\n".join(found)


def test_governed_teams_pass_every_control_tower_rule(governed_teams, tmp_path):
    _, outdir = governed_teams
    failures = failed_rules(*unpack_rules(tmp_path), sorted(outdir.glob("*.template.json")))
    assert len(failures) == 6 and all(rules == set() for rules in failures.values()), failures


def test_each_teams_directory_bucket_is_encrypted_as_the_deployments_buckets(teams_app, governed_teams):
    """s3-express: one directory bucket per team in the training zone, retained, SSE-S3; with control-tower
    SSE-KMS under the buckets' customer managed key (directory buckets take one by ARN)."""
    for mode, (_, outdir) in outdirs(teams_app, governed_teams).items():
        storage = load_templates(outdir)["trainstack-storage"]
        buckets = [body for body in storage["Resources"].values() if body["Type"] == DIRECTORY_BUCKET]
        names = sorted(body["Properties"]["BucketName"] for body in buckets)
        assert names == [
            f"trainstack-{team}-ckpt-111111111111--use1-az4--x-s3" for team in ("research", "search")
        ]
        for body in buckets:
            assert body["DeletionPolicy"] == "Retain", mode
            assert body["Properties"]["LocationName"] == "use1-az4"
            assert body["Properties"]["DataRedundancy"] == "SingleAvailabilityZone"
            [rule] = body["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"]
            default = rule["ServerSideEncryptionByDefault"]
            if mode == "teams":
                assert default == {"SSEAlgorithm": "AES256"}
            else:
                assert default["SSEAlgorithm"] == "aws:kms" and rule["BucketKeyEnabled"] is True
                [key] = [i for i, b in storage["Resources"].items() if b["Type"] == "AWS::KMS::Key"]
                assert default["KMSMasterKeyID"] == {"Fn::GetAtt": [key, "Arn"]}
