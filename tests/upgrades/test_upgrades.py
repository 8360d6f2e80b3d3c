"""Upgrades from every kept release deploy cleanly (docs/upgrading.md): today's app, synthesized with the same
config, deployed over each release kept under tests/upgrades/releases replaces or removes no stateful
resource, creates no fixed-name resource again and links no conflicting data repository association.
A release whose upgrade needs a config line (docs/upgrading.md names each) keeps it beside its templates, in
upgrade.yaml ({config name: lines to add}): the test adds exactly those lines, and shows the upgrade failing
without them. tests/upgrades/test_deploy_review.py shows the review failing on a deliberate file system
replacement."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import NO_ENV, REPO_ROOT, deep_merge, synthesize
from trainstack.app_templates import read_directory
from trainstack.config_loading import load_settings, parse_settings
from trainstack.deploy_findings import findings

RELEASES = Path(__file__).resolve().parent / "releases"
KEPT = sorted(
    (release.name, config.name)
    for release in RELEASES.iterdir()
    for config in release.iterdir()
    if config.is_dir()
)


def todays_config(name: str) -> Path:
    """The config file of today's checkout that a kept config was synthesized from (same name)."""
    return REPO_ROOT / "config" / ("default.yaml" if name == "default" else f"examples/{name}.yaml")


def upgrade_lines(release: str, config: str) -> dict:
    """The config lines docs/upgrading.md says an upgrade from `release` with `config` needs ({} if none)."""
    notes = RELEASES / release / "upgrade.yaml"
    return (yaml.safe_load(notes.read_text()) or {}).get(config, {}) if notes.exists() else {}


@pytest.fixture(scope="module")
def todays_app(default_app, teams_app, tmp_path_factory):
    """Today's templates per kept config name and added lines, each synthesized once (the default's and the
    teams example's as the session does)."""
    apps = {
        ("default", "{}"): read_directory(Path(default_app[2].directory)),
        ("teams", "{}"): read_directory(Path(teams_app[2].directory)),
    }

    def app(name: str, lines: dict):
        key = (name, json.dumps(lines, sort_keys=True))
        if key not in apps:
            outdir = tmp_path_factory.mktemp(f"{name}.cdk.out")
            data = yaml.safe_load(todays_config(name).read_text())
            settings = parse_settings(deep_merge(data, lines), NO_ENV, source=f"{name} + {lines}")
            synthesize(settings, outdir)
            apps[key] = read_directory(outdir)
        return apps[key]

    return app


def test_the_four_landed_releases_are_kept_for_each_config_they_had():
    releases = {
        json.loads((release / "release.json").read_text())["commit"] for release in RELEASES.iterdir()
    }
    assert releases >= {"d837c7d", "21aeb18", "77300eb", "19fc479"}
    assert {config for _, config in KEPT} >= {"default", "eu-west-1"}


@pytest.mark.parametrize(("release", "config"), KEPT, ids=[f"{r}-{c}" for r, c in KEPT])
def test_upgrading_a_kept_release_loses_nothing_and_fails_on_nothing(release, config, todays_app):
    today = todays_app(config, upgrade_lines(release, config))
    found = findings(read_directory(RELEASES / release / config), today)
    assert [finding.sentence for finding in found] == []


def test_0_5_0s_split_links_without_the_documented_line_fail_and_the_review_names_it(todays_app):
    """Release 0.5.0 (7fc7aa9) linked the dataset at /dataset and the checkpoints at /checkpoints: without
    `migrations.keep_split_fsx_links`, today's association at / conflicts with them; the review says so."""
    assert upgrade_lines("7fc7aa9", "default") == {"migrations": {"keep_split_fsx_links": True}}
    found = findings(read_directory(RELEASES / "7fc7aa9" / "default"), todays_app("default", {}))
    sentences = " ".join(finding.sentence for finding in found)
    assert "a file system path of / allows one data repository association only" in sentences
    assert "`migrations: {keep_split_fsx_links: true}`" in sentences


@pytest.mark.parametrize("release", sorted({release for release, _ in KEPT}))
def test_each_kept_releases_config_files_still_load(release):
    """A platform team's config from a release is still valid: the upgrade needs no config edit."""
    for config in sorted((RELEASES / release).glob("*/config.yaml")):
        load_settings(config)
