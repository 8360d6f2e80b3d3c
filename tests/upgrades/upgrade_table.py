"""Print docs/upgrading.md's table: what deploying an app's templates over each kept release does, per stack.

    python tests/upgrades/upgrade_table.py default=cdk.out [eu-west-1=DIR ...]

Each argument names a kept config and a directory holding today's templates synthesized with it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from trainstack.app_templates import read_directory  # noqa: E402  (after the path insert above)
from trainstack.deploy_changes import ADDED, REMOVED, REPLACED, change_counts  # noqa: E402
from trainstack.deploy_findings import review  # noqa: E402

RELEASES = Path(__file__).resolve().parent / "releases"


def rows(config: str, today: Path) -> list[str]:
    new = read_directory(today)
    lines = []
    for release in sorted(
        RELEASES.iterdir(), key=lambda path: json.loads((path / "release.json").read_text())["date"]
    ):
        kept = release / config
        if not kept.is_dir():
            continue
        changes, found = review(read_directory(kept), new)
        counts = change_counts(changes)
        cells = [f"{stack}: +{n[ADDED]} -{n[REMOVED]} ~{n[REPLACED]}" for stack, n in sorted(counts.items())]
        lines.append(f"| {release.name} | {config} | {'; '.join(cells)} | {len(found)} |")
    return lines


def main() -> None:
    print("| release | config | stack: +added -removed ~replaced | findings |")
    print("|---|---|---|---|")
    for argument in sys.argv[1:]:
        config, directory = argument.split("=", 1)
        print("\n".join(rows(config, Path(directory))))


if __name__ == "__main__":
    main()
