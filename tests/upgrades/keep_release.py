"""Keep a landed release's synthesized templates as upgrade test data (docs/upgrading.md, "Keeping a
release").

    python tests/upgrades/keep_release.py COMMIT [COMMIT ...]

For each COMMIT: its tree is exported (`git archive`) to a temporary directory beside this checkout's .venv
and node_modules, and the CDK CLI synthesizes that commit's own app (its app.py, stacks/ and trainstack/
first on PYTHONPATH) with its config/default.yaml and each of its config/examples/*.yaml. What an upgrade diff
reads is kept under tests/upgrades/releases/<commit>/<config name>/: each stack's template, gzipped,
without what changes on every build and never deploys (resource Metadata, AWS::CDK::Metadata, the
bootstrap version check), plus the config file itself and release.json (the commit, its date and subject).
The output is deterministic: keeping a release twice writes the same bytes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RELEASES = Path(__file__).resolve().parent / "releases"
sys.path.insert(0, str(REPO))

from trainstack.deploy_changes import strip_build_noise  # noqa: E402  (after the path insert above)

TEMPLATE_SUFFIX = ".template.json"


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout


def export_tree(commit: str, destination: Path) -> None:
    archive = subprocess.run(["git", "archive", commit], cwd=REPO, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(destination, filter="data")
    for shared in (".venv", "node_modules"):
        (destination / shared).symlink_to(REPO / shared)


def configs_of(tree: Path) -> list[Path]:
    return [tree / "config" / "default.yaml", *sorted((tree / "config" / "examples").glob("*.yaml"))]


def synthesize(tree: Path, config: Path, outdir: Path) -> None:
    environment = dict(
        os.environ,
        PYTHONPATH=str(tree),
        JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20",
        CDK_DISABLE_VERSION_CHECK="1",
        PATH=f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",
    )
    command = [str(REPO / "node_modules" / ".bin" / "cdk"), "synth", "--quiet", "--no-notices"]
    command += ["-c", f"config={config.relative_to(tree)}", "-o", str(outdir)]
    subprocess.run(command, cwd=tree, env=environment, check=True, capture_output=True)


def write_gzip(path: Path, text: str) -> None:
    # mtime 0 and no file name in the header: the same template gives the same bytes.
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as packed:
        packed.write(text.encode())


def keep(commit: str) -> Path:
    sha = git("rev-parse", "--short=7", commit).strip()
    date, subject = git("log", "-1", "--format=%cI%n%s", sha).splitlines()
    target = RELEASES / sha
    shutil.rmtree(target, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix=f"release-{sha}-") as scratch:
        tree = Path(scratch) / "tree"
        export_tree(sha, tree)
        for config in configs_of(tree):
            outdir = Path(scratch) / f"cdk.out.{config.stem}"
            synthesize(tree, config, outdir)
            kept = target / config.stem
            kept.mkdir(parents=True)
            shutil.copyfile(config, kept / "config.yaml")
            for template in sorted(outdir.glob(f"*{TEMPLATE_SUFFIX}")):
                stripped = strip_build_noise(json.loads(template.read_text()))
                write_gzip(kept / f"{template.name}.gz", json.dumps(stripped, indent=1, sort_keys=True))
            print(f"kept {sha} {config.relative_to(tree)}: {len(list(kept.glob('*.gz')))} stacks")
    release = {"commit": sha, "date": date, "subject": subject}
    (target / "release.json").write_text(json.dumps(release, indent=1) + "\n")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("commits", nargs="+", metavar="COMMIT", help="a landed release of main")
    for commit in parser.parse_args().commits:
        keep(commit)


if __name__ == "__main__":
    main()
