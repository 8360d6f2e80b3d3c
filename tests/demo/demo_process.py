"""A demo module run as `make demo` / `make demo-queue` run it: its own process, no AWS credentials."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import DEFAULT_CONFIG, REPO_ROOT


def run_demo(module: str, *arguments: str) -> str:
    """stdout of `python -m MODULE --config <default> ARGUMENTS`, which must exit 0."""
    result = subprocess.run(
        [sys.executable, "-m", module, "--config", str(DEFAULT_CONFIG), *arguments],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={key: value for key, value in os.environ.items() if not key.startswith("AWS_")},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout
