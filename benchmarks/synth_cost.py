"""Synth cost of the whole trainstack app against a minimal one-stack CDK app (one S3 bucket), side by side.

Two measurements, each after one unmeasured warm-up run of both apps, interleaved over several repetitions
(alternating which goes first) so that machine noise hits both alike; both apps use cdk.json's flags:

- cli: `cdk synth` as a user runs it (`make synth`): CDK CLI, python, jsii's node kernel, synthesis,
  validation plugins, asset staging. This is the figure the goal (whole <= 1.5x minimal) is judged on.
- in-process: app construction + app.synth() in this already warm process: only what the app itself
  adds, without the fixed start-up cost that dominates both apps' cli time.

    .venv/bin/python benchmarks/synth_cost.py [--repetitions 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import aws_cdk as cdk  # noqa: E402
from aws_cdk import aws_s3 as s3  # noqa: E402

from stacks.app_builder import build_app  # noqa: E402
from trainstack.config_loading import load_settings  # noqa: E402

CDK_CLI = REPO_ROOT / "node_modules" / ".bin" / "cdk"
CDK_CONTEXT = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
GOAL_RATIO = 1.5
MINIMAL_APP_SOURCE = """\
import aws_cdk as cdk
from aws_cdk import aws_s3 as s3

app = cdk.App()
s3.Bucket(cdk.Stack(app, "Minimal"), "Bucket")
app.synth()
"""


def in_process_whole(outdir: str) -> None:
    app = cdk.App(outdir=outdir, context=CDK_CONTEXT)
    build_app(app, load_settings(environ={}))
    app.synth()


def in_process_minimal(outdir: str) -> None:
    app = cdk.App(outdir=outdir, context=CDK_CONTEXT)
    s3.Bucket(cdk.Stack(app, "Minimal"), "Bucket")
    app.synth()


def cli_synth(app_command: str | None) -> Callable[[str], None]:
    """`cdk synth` in the repository (cdk.json's flags), of cdk.json's app or of `app_command`."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in ("CDK_DEFAULT_ACCOUNT", "CDK_DEFAULT_REGION")
    } | {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "CDK_DISABLE_VERSION_CHECK": "1",
    }

    def synth(outdir: str) -> None:
        command = [str(CDK_CLI), "synth", "--quiet", "--no-notices", "-o", outdir]
        if app_command:
            command += ["--app", app_command]
        subprocess.run(command, cwd=REPO_ROOT, env=environment, check=True, capture_output=True)

    return synth


def timed(synth: Callable[[str], None]) -> float:
    with tempfile.TemporaryDirectory(prefix="synth-cost-") as outdir:
        start = time.perf_counter()
        synth(str(Path(outdir) / "cdk.out"))
        return time.perf_counter() - start


def compare(
    label: str, whole: Callable[[str], None], minimal: Callable[[str], None], repetitions: int
) -> float:
    cases = {"whole app": whole, "minimal app": minimal}
    for synth in cases.values():  # warm-up, not measured
        timed(synth)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for repetition in range(1, repetitions + 1):
        order = list(cases) if repetition % 2 else list(reversed(cases))
        for name in order:
            times[name].append(timed(cases[name]))
        print(
            f"  {label} repetition {repetition}: "
            + ", ".join(f"{name} {times[name][-1]:.2f} s" for name in cases)
        )
    whole_median, minimal_median = (statistics.median(times[name]) for name in cases)
    ratio = whole_median / minimal_median
    print(f"{label}: median whole app {whole_median:.2f} s, minimal app {minimal_median:.2f} s", end="")
    print(f", ratio {ratio:.2f}")
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="synth-cost-app-") as app_dir:
        minimal_app = Path(app_dir) / "minimal_app.py"
        minimal_app.write_text(MINIMAL_APP_SOURCE)
        cli_ratio = compare("cli", cli_synth(None), cli_synth(f"python3 {minimal_app}"), args.repetitions)
    compare("in-process", in_process_whole, in_process_minimal, args.repetitions)
    verdict = "met" if cli_ratio <= GOAL_RATIO else "NOT met"
    print(f"goal: cli ratio <= {GOAL_RATIO}: {verdict} ({cli_ratio:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
