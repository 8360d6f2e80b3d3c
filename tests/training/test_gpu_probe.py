"""benchmarks/gpu_probe.sh --dry-run: every part of the GPU probe runs on the CPU and prints its ratio."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.training.harness import REPO_ROOT

NUMBER = r"[0-9][0-9,]*(?:\.[0-9]+)?"
RATIO = rf"{NUMBER} / {NUMBER} [a-z/]+ = (?P<ratio>{NUMBER})"


def test_the_dry_run_prints_every_ratio_of_the_report():
    result = subprocess.run(
        ["bash", str(REPO_ROOT / "benchmarks" / "gpu_probe.sh"), "--dry-run"],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    expected = {
        "tokens/s": rf"^\(a\) tokens/s train\.py / bare loop: {RATIO}$",
        "save blocking": rf"^\(b\) async save blocking part / raw write of the same {NUMBER} MB: {RATIO}$",
        "save written": rf"^\(b\) async save until written / raw write: {RATIO} \(raw {NUMBER} MB/s",
        "all-reduce": rf"^\(d\) all_reduce / device-local copy of {NUMBER} MB: {RATIO}; "
        rf"torch\.distributed gloo over 2 rank\(s\): algbw {NUMBER} GB/s, busbw {NUMBER} GB/s",
    }
    for what, pattern in expected.items():
        match = re.search(pattern, output, re.MULTILINE)
        assert match, f"no {what} ratio in:\n{output}"
        assert float(match["ratio"].replace(",", "")) > 0, what
    # On the CPU there is no MFU and no device memory counter: the lines say so instead of a figure.
    assert re.search(r"^\(a\) MFU train\.py / bare loop: n/a \(no MFU: no GPU", output, re.MULTILINE), output
    assert re.search(
        rf"^\(c\) --init-from peak device memory / bound "
        rf"\(parameters {NUMBER} MB \+ one chunk {NUMBER} MB\): n/a",
        output,
        re.MULTILINE,
    ), output
    assert "(d) nccl-tests: not run (dry run)" in output
    assert re.search(r"^gpu_probe: done in \d+ s$", output, re.MULTILINE), output
