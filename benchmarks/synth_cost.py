"""Warm synth cost of the whole trainstack app against a minimal one-stack CDK app (one S3 bucket).

Both run in this one process after a warm-up of each (jsii's node kernel started, modules loaded), with
cdk.json's feature flags, interleaved over several repetitions so that machine noise hits both alike.
Prints every repetition, the medians and their ratio (goal: whole app <= 1.5x the minimal app).

    .venv/bin/python benchmarks/synth_cost.py [--repetitions 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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
from trainstack.config import load_settings  # noqa: E402

CDK_CONTEXT = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
GOAL_RATIO = 1.5


def synth_whole_app(outdir: str) -> None:
    app = cdk.App(outdir=outdir, context=CDK_CONTEXT)
    build_app(app, load_settings(environ={}))
    app.synth()


def synth_minimal_app(outdir: str) -> None:
    app = cdk.App(outdir=outdir, context=CDK_CONTEXT)
    s3.Bucket(cdk.Stack(app, "Minimal"), "Bucket")
    app.synth()


def timed(synth: Callable[[str], None]) -> float:
    with tempfile.TemporaryDirectory(prefix="synth-cost-") as outdir:
        start = time.perf_counter()
        synth(outdir)
        return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=5)
    args = parser.parse_args()

    cases = {"whole app": synth_whole_app, "minimal app": synth_minimal_app}
    for synth in cases.values():  # warm-up, not measured
        timed(synth)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for repetition in range(1, args.repetitions + 1):
        # Alternate which case goes first, so neither always runs on the heels of the other.
        order = list(cases) if repetition % 2 else list(reversed(cases))
        for name in order:
            times[name].append(timed(cases[name]))
        print(f"repetition {repetition}: " + ", ".join(f"{name} {times[name][-1]:.2f} s" for name in cases))

    whole, minimal = (statistics.median(times[name]) for name in cases)
    ratio = whole / minimal
    print(f"median warm synth: whole app {whole:.2f} s, minimal app {minimal:.2f} s")
    verdict = "met" if ratio <= GOAL_RATIO else "NOT met"
    print(f"ratio whole/minimal: {ratio:.2f} (goal <= {GOAL_RATIO}: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
