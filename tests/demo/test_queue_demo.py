"""`make demo-queue`'s path: the pipeline synthesized in queue mode, two teams' retrainings through the
emulated AWS Batch queue of 2 instances, real local training; fair share starts teamB's waiting run before
teamA's third, which was submitted earlier."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import DEFAULT_CONFIG, REPO_ROOT


def test_two_teams_share_the_queue_and_fair_share_orders_the_waiting_runs(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainstack.demo.queue_run",
            "--config",
            str(DEFAULT_CONFIG),
            "--workdir",
            str(tmp_path / "demo"),
            "--max-steps",
            "10",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={key: value for key, value in os.environ.items() if not key.startswith("AWS_")},
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    # teamA's first two runs take both instances; its third and teamB's wait.
    for waiting in ("trainstack-a3-1", "trainstack-b1-1"):
        assert f"{waiting}: RUNNABLE" in out
    assert (
        "Batch started the jobs in this order: "
        "trainstack-a1-1 -> trainstack-a2-1 -> trainstack-b1-1 -> trainstack-a3-1"
    ) in out
    for run in ("a1", "a2", "a3", "b1"):
        assert f"trainstack-{run}: SUCCEEDED, training job AWSBatchtrainstack-{run}-1" in out
