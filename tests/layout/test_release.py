"""Releases are versioned (docs/upgrading.md, "Cutting a release"): the package's version is CHANGELOG.md's
newest entry, and every release kept as upgrade test data has its entry, naming its commit."""

from __future__ import annotations

import json
import re
import tomllib

from tests.conftest import REPO_ROOT

ENTRY = re.compile(r"^## (?P<version>\d+\.\d+\.\d+) — (?P<date>\d{4}-\d{2}-\d{2})(?P<rest>.*)$", re.M)


def entries() -> list[re.Match]:
    return list(ENTRY.finditer((REPO_ROOT / "CHANGELOG.md").read_text()))


def test_the_package_version_is_the_newest_changelog_entry():
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    versions = [entry["version"] for entry in entries()]
    assert versions[0] == project["version"]
    assert versions == sorted(versions, key=lambda text: tuple(map(int, text.split("."))), reverse=True)


def test_every_kept_release_has_a_changelog_entry_naming_its_commit():
    named = {commit for entry in entries() for commit in re.findall(r"commit ([0-9a-f]{7})", entry["rest"])}
    kept = {
        json.loads(path.read_text())["commit"][:7]
        for path in (REPO_ROOT / "tests/upgrades/releases").glob("*/release.json")
    }
    assert kept <= named
