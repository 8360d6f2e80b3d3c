"""benchmarks/gpu_probe.sh --dry-run: every part of the GPU probe runs on the CPU and prints its ratio; and
what it says where it cannot run."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import torch

from tests.training.harness import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import gpu_probe  # noqa: E402

NUMBER = r"[0-9][0-9,]*(?:\.[0-9]+)?"
RATIO = rf"{NUMBER} / {NUMBER} [a-z/]+ = (?P<ratio>{NUMBER})"
PROBE = REPO_ROOT / "benchmarks" / "gpu_probe.sh"


def test_the_dry_run_prints_every_ratio_of_the_report():
    result = subprocess.run(
        ["bash", str(PROBE), "--dry-run"],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    expected = {
        "tokens/s": rf"^\(a\) tokens/s train\.py / bare loop \(DDP\): {RATIO}$",
        "FSDP1 tokens/s": rf"^\(b\) tokens/s bare loop FSDP1 as the SMP path wraps it / bare loop \(DDP\): "
        rf"{RATIO}$",
        "save blocking": rf"^\(c\) async save blocking part / raw write of the same {NUMBER} MB: {RATIO}$",
        "save written": rf"^\(c\) async save until written / raw write: {RATIO} "
        rf"\(absolute: raw {NUMBER} MB/s",
        "all-reduce": rf"^\(e\) all_reduce / device-local copy of {NUMBER} MB: {RATIO}; absolute: "
        rf"torch\.distributed gloo over 2 ranks: algbw {NUMBER} GB/s, busbw {NUMBER} GB/s",
    }
    for what, pattern in expected.items():
        match = re.search(pattern, output, re.MULTILINE)
        assert match, f"no {what} ratio in:\n{output}"
        assert float(match["ratio"].replace(",", "")) > 0, what
    # On the CPU there is no MFU and no device memory counter: the lines say so instead of a figure.
    for part in ("(a) MFU train.py", "(b) MFU bare loop FSDP1"):
        assert re.search(rf"^{re.escape(part)} / bare loop \(DDP\): n/a \(no MFU: no GPU", output, re.M), (
            output
        )
    assert re.search(
        rf"^\(d\) --init-from \(DDP, chunked set_model_state_dict\) peak device memory / bound "
        rf"\(parameters {NUMBER} MB \+ one chunk {NUMBER} MB\): n/a",
        output,
        re.MULTILINE,
    ), output
    assert "(e) nccl-tests: not run (dry run)" in output
    assert re.search(r"^gpu_probe: done in \d+ s$", output, re.MULTILINE), output


def test_without_what_it_needs_the_probe_says_what_is_missing_in_one_sentence(monkeypatch):
    result = subprocess.run(
        ["bash", str(PROBE)],
        env={**os.environ, "PYTHON": "/nonexistent/python"},
        capture_output=True,
        text=True,
    )
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("gpu_probe.sh: there is no Python interpreter /nonexistent/python here")
    assert result.stderr.count("\n") == 1 and result.stderr.rstrip().endswith(".")

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    no_gpu = gpu_probe.missing(gpu=True)
    assert f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU" in no_gpu
    assert gpu_probe.missing(gpu=False) is None  # the dry run needs no GPU
    monkeypatch.setattr(torch.version, "cuda", None)
    assert "is a CPU-only build" in gpu_probe.missing(gpu=True)
    monkeypatch.setattr(gpu_probe, "REQUIRED_MODULES", ("numpy", "no_such_module_here"))
    assert "cannot import no_such_module_here (ModuleNotFoundError" in gpu_probe.missing(gpu=True)
    for sentence in (no_gpu, gpu_probe.missing(gpu=True)):
        assert "\n" not in sentence and sentence.endswith(".")


def test_one_gpu_prints_no_all_reduce_figure():
    runtime = type("Runtime", (), {"world_size": 1, "backend": "cpu:gloo,cuda:nccl"})()
    assert gpu_probe.all_reduce_line(runtime, None) == "(e) all_reduce / device-local copy: n/a (1 rank)"
