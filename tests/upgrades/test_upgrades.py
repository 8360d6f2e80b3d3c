"""Upgrades from every kept release deploy cleanly (docs/upgrading.md): today's app, synthesized with the same
config, deployed over each release kept under tests/upgrades/releases replaces or removes no stateful
resource, creates no fixed-name resource again and links no conflicting data repository association.
tests/upgrades/test_deploy_review.py shows the same review failing on a deliberate file system replacement."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, synthesize
from trainstack.app_templates import read_directory
from trainstack.config_loading import load_settings
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


@pytest.fixture(scope="module")
def todays_app(default_app, tmp_path_factory):
    """Today's templates per kept config name, each config synthesized once (the default's by the session)."""
    apps = {"default": read_directory(Path(default_app[2].directory))}

    def app(name: str):
        if name not in apps:
            outdir = tmp_path_factory.mktemp(f"{name}.cdk.out")
            synthesize(load_settings(todays_config(name)), outdir)
            apps[name] = read_directory(outdir)
        return apps[name]

    return app


def test_the_four_landed_releases_are_kept_for_each_config_they_had():
    releases = {
        json.loads((release / "release.json").read_text())["commit"] for release in RELEASES.iterdir()
    }
    assert releases >= {"d837c7d", "21aeb18", "77300eb", "19fc479"}
    assert {config for _, config in KEPT} >= {"default", "eu-west-1"}


@pytest.mark.parametrize(("release", "config"), KEPT, ids=[f"{r}-{c}" for r, c in KEPT])
def test_upgrading_a_kept_release_loses_nothing_and_fails_on_nothing(release, config, todays_app):
    found = findings(read_directory(RELEASES / release / config), todays_app(config))
    assert [finding.sentence for finding in found] == []


@pytest.mark.parametrize("release", sorted({release for release, _ in KEPT}))
def test_each_kept_releases_config_files_still_load(release):
    """A platform team's config from a release is still valid: the upgrade needs no config edit."""
    for config in sorted((RELEASES / release).glob("*/config.yaml")):
        load_settings(config)
