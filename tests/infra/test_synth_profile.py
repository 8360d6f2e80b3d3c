"""benchmarks/synth_profile.py, the probe behind the synth-cost analysis, counts jsii requests per phase and
the JavaScript node compiles; run on the minimal app (seconds), it must see what that app is made of."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_the_probe_counts_the_minimal_apps_requests_and_modules():
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "synth_profile.py"), "--apps", "minimal"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    phases = dict(re.findall(r"^  (import|build|synth)\s+minimal:\s+(\d+);", output, re.MULTILINE))
    # Importing aws_cdk loads its jsii assemblies, the app creates a stack and a bucket, synth is one call.
    assert set(phases) == {"import", "build", "synth"}, output
    assert all(int(count) > 0 for count in phases.values()), output
    assert re.search(r"^  build\s+.*Create [1-9]", output, re.MULTILINE), output
    assert re.search(r"^  import\s+.*Load [1-9]", output, re.MULTILINE), output
    modules = re.search(r"^  minimal: (\d+) files, ([0-9.]+) MB$", output, re.MULTILINE)
    assert modules and int(modules[1]) > 0, output
    s3 = re.search(r"^  minimal:\s+[0-9.]+ MB\s+\d+ files  aws-cdk-lib/aws-s3$", output, re.MULTILINE)
    assert s3, output
