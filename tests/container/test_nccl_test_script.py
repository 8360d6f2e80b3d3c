"""training_scripts/nccl_test.sh, the nccl-test profile's entry point, with a fake nccl-tests binary."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "training_scripts" / "nccl_test.sh"
FAKE_PERF = """#!/usr/bin/env bash
echo "$(basename "$0") $*"
echo "# Avg bus bandwidth    : 77.9"
"""


@pytest.fixture
def run_script(tmp_path):
    bin_dir = tmp_path / "nccl-tests"
    bin_dir.mkdir()
    for operation in ("all_reduce", "all_gather"):
        (bin_dir / f"{operation}_perf").write_text(FAKE_PERF)
        (bin_dir / f"{operation}_perf").chmod(0o755)
    model_dir = tmp_path / "model"

    def run(*args: str, rank: str = "0") -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": "/usr/bin:/bin",
            "NCCL_TESTS_BIN": str(bin_dir),
            "SM_MODEL_DIR": str(model_dir),
            "OMPI_COMM_WORLD_RANK": rank,
            "OMPI_COMM_WORLD_SIZE": "16",
            "NCCL_NET": "AWS Libfabric",
        }
        command = ["bash", str(SCRIPT), *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, check=False)

    run.model_dir = model_dir  # type: ignore[attr-defined]
    return run


def test_rank_zero_runs_one_gpu_per_rank_and_keeps_the_table(run_script):
    result = run_script("--max_bytes", "16G", "--iters", "100")
    assert result.returncode == 0, result.stderr
    assert "all_reduce_perf -b 8 -e 16G -f 2 -g 1 -n 100 -w 5 -c 1" in result.stdout
    assert "nccl-test: 16 ranks (one per GPU), all_reduce, 8..16G" in result.stdout
    assert "nccl-test: env NCCL_NET=AWS Libfabric" in result.stdout
    assert "# Avg bus bandwidth    : 77.9" in (run_script.model_dir / "all_reduce_perf.txt").read_text()


def test_other_ranks_only_run_the_benchmark(run_script):
    result = run_script("--operation", "all_gather", rank="5")
    assert result.returncode == 0
    assert result.stdout.splitlines()[0] == "all_gather_perf -b 8 -e 2G -f 2 -g 1 -n 20 -w 5 -c 1"
    assert not run_script.model_dir.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--learning_rate", "0.1"), "unknown hyperparameter --learning_rate; allowed: operation, min_bytes"),
        (("--operation", "sendrecv"), "operation must be one of all_reduce, all_gather"),
        (("--iters",), "--iters needs a value"),
    ],
)
def test_bad_hyperparameters_fail_with_one_sentence(run_script, args, message):
    result = run_script(*args)
    assert result.returncode == 2
    assert message in result.stderr
