"""`trainstack check-config NEW --against OLD` and the deploy guard (`make deploy` runs the same command
against the deployed templates): a deployment_type change names the file system's replacement, compliance:
control-tower the three buckets', and both are refused unless ALLOW_REPLACE names them. The first test also
shows the upgrade review failing on a deliberate replacement (tests/upgrades/test_upgrades.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import deep_merge, default_config_data, synthesize
from tests.infra.test_governed import GOVERNED
from trainstack.cli import main
from trainstack.config_loading import load_settings

LATEST_RELEASE = Path(__file__).resolve().parent / "releases" / "19fc479" / "default"
DEPLOYMENT_TYPE_SENTENCE = (
    "finding: trainstack-storage FileSystem (AWS::FSx::FileSystem) would be REPLACED by the change to "
    "LustreConfiguration.DeploymentType"
)


def write_config(directory: Path, overrides: dict) -> Path:
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(deep_merge(default_config_data(), overrides)))
    return path


@pytest.fixture(scope="module")
def scratch_config(tmp_path_factory) -> Path:
    return write_config(tmp_path_factory.mktemp("scratch"), {"fsx": {"deployment_type": "SCRATCH_2"}})


@pytest.fixture(scope="module")
def governed_templates(tmp_path_factory) -> tuple[Path, Path]:
    """compliance: control-tower's config and its templates, synthesized once."""
    directory = tmp_path_factory.mktemp("governed")
    config = write_config(directory, GOVERNED)
    synthesize(load_settings(config), directory / "cdk.out")
    return config, directory / "cdk.out"


def test_a_deployment_type_change_is_named_and_the_upgrade_review_fails_on_it(scratch_config, capsys):
    """The CLI synthesizes the edited config itself and reviews it against the latest kept release."""
    assert main(["check-config", str(scratch_config), "--against", str(LATEST_RELEASE)]) == 1
    out, err = capsys.readouterr()
    assert DEPLOYMENT_TYPE_SENTENCE in out
    assert "a new, empty file system; the old one (its files: the imported dataset, fsx checkpoints" in out
    # A new file system gets a new association too (its FileSystemId).
    assert "The deploy is refused" in err and "ALLOW_REPLACE=DatasetAssociation,FileSystem" in err


def test_compliance_control_tower_names_the_three_bucket_replacements(
    default_app, governed_templates, capsys
):
    config, templates = governed_templates
    deployed = default_app[2].directory
    assert main(["check-config", str(config), "--templates", str(templates), "--against", deployed]) == 1
    out, _ = capsys.readouterr()
    for bucket in ("DatasetBucket", "CheckpointBucket", "ArtifactBucket"):
        assert (
            f"finding: trainstack-storage {bucket}" in out
            and "(AWS::S3::Bucket) would be REPLACED by the change to ObjectLockEnabled" in out
        ), out
    assert out.count("cfn-lint's registry schema says update in place: treated as a replacement") >= 3


def test_the_guard_lets_a_change_through_only_when_every_finding_is_named(
    default_app, governed_templates, capsys, monkeypatch
):
    config, templates = governed_templates
    review = [
        "check-config",
        str(config),
        "--templates",
        str(templates),
        "--against",
        default_app[2].directory,
    ]
    assert main(review) == 1
    findings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("finding: ")]
    names = {line.split()[2] for line in findings}  # the logical ids
    assert main([*review, "--allow", "DatasetBucket"]) == 1  # one named, the others still refused
    capsys.readouterr()
    monkeypatch.setenv("ALLOW_REPLACE", ",".join(sorted(names)))  # make deploy ALLOW_REPLACE=...
    assert main(review) == 0
    out = capsys.readouterr().out
    assert "finding: " not in out and out.count("allowed: ") == len(findings)


def test_the_same_config_against_its_own_templates_has_nothing_to_review(default_app, capsys):
    directory = default_app[2].directory
    assert main(["check-config", "--templates", directory, "--against", directory]) == 0
    assert "deploy review: no resource with data replaced or removed" in capsys.readouterr().out
