"""Where a cold synth of the whole trainstack app spends its jsii traffic and its JavaScript, side by side
with a minimal one-stack app (one S3 bucket): the counts that explain benchmarks/synth_cost.py's ratio.

Each app runs cold in a child process of its own (`--child`), as `cdk synth` runs it:
- jsii requests from Python to the node kernel, per phase (importing the stack modules, building the
  constructs, app.synth()) and per kind (create, invoke, get, ...), with the time spent waiting on node,
  and the lines of this repository that make the most of them;
- callbacks from node into Python (a Python-implemented interface called during synth);
- the JavaScript node compiles, per package and aws-cdk-lib submodule (files and bytes), counted by a
  `--require` hook in the jsii kernel's node (through jsii's JSII_NODE).

Counts are exact and repeat from run to run; the times are one cold run's and move with the machine.
It patches jsii's process provider to count, so it is a probe, not part of the product.

    .venv/bin/python benchmarks/synth_profile.py [--top 12]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PHASES = ("import", "build", "synth")
# Counts each module node compiles, per package (and aws-cdk-lib submodule), and writes them at exit.
NODE_HOOK = """
const Module = require('module');
const compile = Module.prototype._compile;
const counts = {};
Module.prototype._compile = function (content, filename) {
  const match = filename.match(/node_modules\\/((?:@[^/]+\\/)?[^/]+)\\/([^/]+)/);
  const key = match ? (match[1] === 'aws-cdk-lib' ? `aws-cdk-lib/${match[2]}` : match[1]) : 'jsii kernel';
  const row = counts[key] || (counts[key] = [0, 0]);
  row[0] += 1; row[1] += content.length;
  return compile.call(this, content, filename);
};
process.on('exit', () => {
  if (Object.keys(counts).length > 1) {
    const dump = `${process.env.TRAINSTACK_PROFILE_DIR}/node-${process.pid}.json`;
    require('fs').writeFileSync(dump, JSON.stringify(counts));
  }
});
"""


def child(app: str, outdir: str) -> dict:
    """Build and synthesize `app` in this fresh process, counting jsii traffic; return the counts."""
    from jsii._kernel.providers import process as jsii_process

    phase = ["import"]
    requests: collections.Counter = collections.Counter()
    waited: collections.Counter = collections.Counter()
    sites: collections.Counter = collections.Counter()
    send = jsii_process._NodeProcess.send

    def counted_send(self, request, response_type):
        start = time.perf_counter()
        try:
            return send(self, request, response_type)
        finally:
            kind = type(request).__name__.removesuffix("Request").lstrip("_")
            requests[(phase[0], kind)] += 1
            waited[phase[0]] += time.perf_counter() - start
            site = next(
                (
                    f"{Path(frame.filename).relative_to(REPO_ROOT)}:{frame.lineno}"
                    for frame in reversed(traceback.extract_stack()[:-2])
                    if frame.filename.startswith(str(REPO_ROOT))
                    and "/benchmarks/" not in frame.filename
                    and "site-packages" not in frame.filename
                ),
                "(outside this repository)",
            )
            sites[(phase[0], site)] += 1

    jsii_process._NodeProcess.send = counted_send
    wall = {}
    start = time.perf_counter()
    import aws_cdk as cdk

    context = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    if app == "whole":
        from stacks.app_builder import build_app
        from trainstack.config_loading import load_settings
    wall["import"] = time.perf_counter() - start
    phase[0] = "build"
    start = time.perf_counter()
    cdk_app = cdk.App(outdir=outdir, context=context)
    if app == "whole":
        build_app(cdk_app, load_settings(environ={}))
    else:
        from aws_cdk import aws_s3 as s3

        s3.Bucket(cdk.Stack(cdk_app, "Minimal"), "Bucket")
    wall["build"] = time.perf_counter() - start
    phase[0] = "synth"
    start = time.perf_counter()
    cdk_app.synth()
    wall["synth"] = time.perf_counter() - start
    return {
        "requests": [[*key, count] for key, count in requests.items()],
        "waited": waited,
        "wall": wall,
        "sites": [[*key, count] for key, count in sites.items()],
    }


def profile(app: str) -> dict:
    """Run `app` cold in a child process with the node hook; its jsii counts and node's compiled modules."""
    with tempfile.TemporaryDirectory(prefix="synth-profile-") as workdir:
        hook = Path(workdir) / "count_modules.js"
        hook.write_text(NODE_HOOK)
        node = Path(workdir) / "node"
        node.write_text(f'#!/bin/sh\nexec node --require "{hook}" "$@"\n')
        node.chmod(0o755)
        environment = os.environ | {
            "JSII_NODE": str(node),
            "TRAINSTACK_PROFILE_DIR": workdir,
            "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        }
        result = subprocess.run(
            [sys.executable, __file__, "--child", app, "--outdir", str(Path(workdir) / "cdk.out")],
            cwd=REPO_ROOT,
            env=environment,
            capture_output=True,
            text=True,
            check=True,
        )
        counts = json.loads(result.stdout.strip().splitlines()[-1])
        modules: collections.Counter = collections.Counter()
        files: collections.Counter = collections.Counter()
        for dump in Path(workdir).glob("node-*.json"):
            for package, (count, size) in json.loads(dump.read_text()).items():
                files[package] += count
                modules[package] += size
        counts["modules"] = {package: [files[package], size] for package, size in modules.items()}
        return counts


def report(profiles: dict[str, dict], top: int) -> None:
    names = list(profiles)
    print("jsii requests per phase (count; seconds waiting on node; phase wall seconds)")
    for phase in PHASES:
        cells = []
        for name in names:
            counts = profiles[name]
            total = sum(count for p, _, count in counts["requests"] if p == phase)
            cells.append(
                f"{name}: {total:4d}; {counts['waited'].get(phase, 0):.2f} s; {counts['wall'][phase]:.2f} s"
            )
        print(f"  {phase:6s}  " + "  |  ".join(cells))
    whole = profiles[names[0]]
    print(f"{names[0]}: requests by kind")
    for phase in PHASES:
        kinds = sorted(((count, kind) for p, kind, count in whole["requests"] if p == phase), reverse=True)
        print(f"  {phase:6s}  " + ", ".join(f"{kind} {count}" for count, kind in kinds))
    print(f"{names[0]}: the {top} lines of this repository that send the most requests")
    for phase, site, count in sorted(whole["sites"], key=lambda row: -row[2])[:top]:
        print(f"  {count:4d}  {phase:6s}  {site}")
    print("JavaScript compiled by the jsii kernel's node (files, MB)")
    for name in names:
        modules = profiles[name]["modules"]
        files = sum(count for count, _ in modules.values())
        size = sum(size for _, size in modules.values())
        print(f"  {name}: {files} files, {size / 1e6:.1f} MB")
    for package, (count, size) in sorted(whole["modules"].items(), key=lambda row: -row[1][1])[:top]:
        print(f"  {names[0]}: {size / 1e6:5.2f} MB {count:4d} files  {package}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--apps", nargs="+", choices=["whole", "minimal"], default=["whole", "minimal"])
    parser.add_argument("--child", choices=["whole", "minimal"], help=argparse.SUPPRESS)
    parser.add_argument("--outdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.path.insert(0, str(REPO_ROOT))
        print(json.dumps(child(args.child, args.outdir)))
        return 0
    report({app: profile(app) for app in args.apps}, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
