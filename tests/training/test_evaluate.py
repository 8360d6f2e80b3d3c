"""evaluate.py, the evaluation job's program: the loss of a trained model on a held-out set, as
evaluation.json and the metric line the job's MetricDefinitions read."""

from __future__ import annotations

import json
import math
import tarfile

import evaluate
import pytest
from data import TokenDataset

from training_scripts.metrics import EVALUATION_METRIC_DEFINITIONS, parse_metrics

VOCABULARY = 512  # the tiny preset's: a model that learned nothing scores ln(512) = 6.24


def run(tmp_path, model_dir, dataset, *extra: str) -> tuple[dict, dict]:
    out = tmp_path / "out"
    flags = ["--model-dir-in", str(model_dir), "--eval-dir", str(dataset / "val"), "--out-dir", str(out)]
    assert evaluate.main([*flags, "--seq_len", "32", "--model_preset", "tiny", *extra]) == 0
    document = json.loads((out / evaluate.EVALUATION_FILE).read_text())
    return document[evaluate.METRICS_KEY], document


def test_a_trained_model_scores_below_chance_and_the_job_metrics_read_the_same_figures(
    tmp_path, dataset, reference_run, capsys
):
    metrics, document = run(tmp_path, reference_run.model_dir, dataset, "--eval_manifest_hash", "abc123")
    assert metrics["loss"]["value"] < math.log(VOCABULARY) - 1
    assert metrics["perplexity"]["value"] == pytest.approx(math.exp(metrics["loss"]["value"]))
    assert metrics["tokens_evaluated"]["value"] == len(TokenDataset(dataset / "val", 32, "eval")) * 32
    assert document["eval_manifest_hash"] == "abc123"
    logged = parse_metrics(capsys.readouterr().out, EVALUATION_METRIC_DEFINITIONS)
    assert logged["evaluation:loss"] == [pytest.approx(metrics["loss"]["value"], abs=1e-6)]
    assert logged["evaluation:tokens"] == [metrics["tokens_evaluated"]["value"]]


def test_a_gzip_model_archive_and_a_token_budget(tmp_path, dataset, reference_run):
    packed = tmp_path / "packed"
    packed.mkdir()
    with tarfile.open(packed / "model.tar.gz", "w:gz") as archive:
        for item in reference_run.model_dir.iterdir():
            archive.add(item, arcname=item.name)
    metrics, _ = run(tmp_path, packed, dataset, "--max_eval_tokens", "64")
    assert metrics["tokens_evaluated"]["value"] == 64


def test_a_missing_model_fails_with_one_sentence(tmp_path, dataset, monkeypatch):
    monkeypatch.setenv("SM_OUTPUT_DIR", str(tmp_path / "output"))
    flags = ["--model-dir-in", str(tmp_path), "--eval-dir", str(dataset / "val"), "--out-dir", str(tmp_path)]
    assert evaluate.main(flags) == 2
    failure = (tmp_path / "output" / "failure").read_text()
    assert "holds neither config.json nor model.tar.gz" in failure
