"""--init-from a saved model: rank 0 alone reads its files and broadcasts them, chunk by chunk, to the other
ranks."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from model import LOAD_CHUNK_BYTES, model_config
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from tests.training.harness import torchrun_command, train
from training_scripts.metrics import parse_metrics

MiB = 1 << 20


def test_a_run_from_another_runs_model_starts_with_its_loss_on_every_rank(dataset, tmp_path, reference_run):
    # The logged loss is the mean over both ranks: a rank without the weights would raise it to ~6.
    run = train(
        dataset, tmp_path, "--init-from", str(reference_run.model_dir),
        "--max-steps", "1", "--log-interval", "1", "--learning-rate", "1e-9",
    )  # fmt: skip
    assert run.returncode == 0, run.output
    (first,) = parse_metrics(run.output)["train:loss"]
    reference = parse_metrics(reference_run.output)["train:loss"]
    assert first < 1.5 * reference[-1] < 0.5 * reference[0], (first, reference)


def test_weights_that_do_not_cover_the_model_are_named_in_one_sentence(dataset, tmp_path, reference_run):
    start = tmp_path / "start"
    shutil.copytree(reference_run.model_dir, start)
    weights = load_file(start / "model.safetensors")
    del weights["lm_head.weight"]
    save_file(weights, start / "model.safetensors", metadata={"format": "pt"})

    run = train(dataset, tmp_path / "out", "--init-from", str(start))
    assert run.returncode != 0
    message = (
        f"--init-from {start} has no weights for 1 of the model's tensors (lm_head.weight): its files must "
        "be those transformers' save_pretrained writes for the class in its config.json."
    )
    assert run.output.count(message) == 1, run.output  # rank 0 reports; every rank stops
    assert run.output.count("Traceback") == 1, run.output  # torchrun's own report; none of a rank


def dry_run_reports(tmp_path, parallelism: str, *flags: str) -> list[dict[str, int]]:
    result = subprocess.run(
        torchrun_command(
            "--dry-run", "--parallelism", parallelism, "--model-dir", str(tmp_path / "dry"), *flags
        ),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = re.findall(r"dry_run rank=\d+ .*?peak_rss_bytes=\d+", result.stdout)  # ranks may share a line
    reports = [{key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", line)} for line in lines]
    reports.sort(key=lambda report: report["rank"])
    assert [report["rank"] for report in reports] == [0, 1], result.stdout
    return reports


@pytest.mark.parametrize(
    "parallelism",
    [
        pytest.param("fsdp", marks=pytest.mark.newer_stack),  # FSDP2 in torch 2.5.1 needs CUDA
        pytest.param("ddp", marks=pytest.mark.image_stack),  # 2.5.1 collected a whole broadcast model
    ],
)
def test_loading_adds_at_most_one_chunk_to_any_ranks_peak(tmp_path, parallelism):
    """Side by side with a dry run that builds the same model from scratch: rank 0 reads the files, and
    every rank receives them, one chunk at a time (125m saved in fp32: 0.54 GB, more than two chunks; the
    1b preset's figures are in docs/training.md)."""
    config = model_config("125m", None, None, 2048)
    saved = tmp_path / "saved"
    AutoModelForCausalLM.from_config(config).save_pretrained(saved)
    file_bytes = sum(p.stat().st_size for p in saved.glob("*.safetensors"))
    slack = 64 * MiB
    assert file_bytes > LOAD_CHUNK_BYTES + slack  # so holding the whole files exceeds the bound below

    scratch = dry_run_reports(tmp_path, parallelism, "--model-preset", "125m")
    loaded = dry_run_reports(tmp_path, parallelism, "--init-from", str(saved))
    peaks = []
    for before, after in zip(scratch, loaded, strict=True):
        assert after["parameter_bytes"] == before["parameter_bytes"]  # fp32 master weights
        peaks.append((before["peak_rss_bytes"], after["peak_rss_bytes"]))
    for before, after in peaks:
        assert after <= before + LOAD_CHUNK_BYTES + slack, (peaks, file_bytes)
