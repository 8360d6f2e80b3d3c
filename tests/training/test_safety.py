"""Training that never loses work: broken or foreign checkpoints, divergence, bad data on one rank,
another world size, and the meta-device build of a large preset. Real CPU runs of train.py
(torchrun, gloo), compared with the session's uninterrupted reference run."""

from __future__ import annotations

import json
import math
import re
import shutil

import numpy as np
import pytest
from model_shapes import PRESETS, parameter_count

from tests.training.harness import (
    MAX_STEPS,
    TRAIN_FLAGS,
    load_weights,
    max_weight_difference,
    torchrun_command,
    train,
    write_learnable_shards,
)
from tests.training.test_train import complete_steps, file_digests
from training_scripts.metrics import parse_metrics

GiB = 1 << 30


def copy_reference_checkpoints(reference_run, tmp_path):
    checkpoints = tmp_path / "checkpoints"
    shutil.copytree(reference_run.checkpoint_dir, checkpoints)
    return checkpoints, [checkpoints / f"step_{step:09d}" for step in complete_steps(checkpoints)]


def test_a_truncated_rng_file_falls_back_to_the_previous_checkpoint(dataset, tmp_path, reference_run):
    checkpoints, (previous, newest) = copy_reference_checkpoints(reference_run, tmp_path)
    rng = newest / "rng" / "rank_1.pt"
    rng.write_bytes(rng.read_bytes()[:20])

    rerun = train(dataset, tmp_path)
    assert rerun.returncode == 0, rerun.output
    assert f"Checkpoint {newest} could not be loaded (rng/rank_1.pt is unreadable" in rerun.output
    assert f"Resumed from {previous}" in rerun.output
    difference = max_weight_difference(load_weights(rerun.model_dir), load_weights(reference_run.model_dir))
    assert difference <= 1e-6


def test_when_none_of_the_runs_checkpoints_loads_it_stops_and_touches_nothing(
    dataset, tmp_path, reference_run
):
    checkpoints, (previous, newest) = copy_reference_checkpoints(reference_run, tmp_path)
    (newest / "COMPLETE").write_text("")  # a marker cut short
    for shard in previous.glob("*.distcp"):
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    before = file_digests(checkpoints)

    rerun = train(dataset, tmp_path)
    assert rerun.returncode != 0, rerun.output
    [error] = [line for line in rerun.output.splitlines() if " ERROR " in line]
    assert f"--checkpoint-dir {checkpoints} holds 2 checkpoint(s) and none loads" in error
    assert f"{newest.name} (its COMPLETE marker is empty or unreadable)" in error
    # A truncated shard fails as the first item read from it does (each rank writes several files).
    assert (
        f"{previous.name} (RuntimeError: PytorchStreamReader failed reading zip archive" in error
        or f"{previous.name} (EOFError)" in error
    ), error
    assert rerun.output.count("Traceback") == 1  # torchrun's own report of the exit status; none of a rank
    assert file_digests(checkpoints) == before  # nothing overwritten, nothing pruned
    assert not rerun.model_dir.exists() or not any(rerun.model_dir.iterdir())


def test_a_checkpoint_of_another_model_is_refused(dataset, tmp_path, reference_run):
    checkpoints, _ = copy_reference_checkpoints(reference_run, tmp_path)
    before = file_digests(checkpoints)
    other = train(dataset, tmp_path, "--vocab-size", "640")  # another embedding: another model
    assert other.returncode != 0, other.output
    [error] = [line for line in other.output.splitlines() if " ERROR " in line]
    assert "(it holds another model: LlamaForCausalLM with" in error
    assert "this run's model is LlamaForCausalLM with" in error
    assert file_digests(checkpoints) == before


def test_a_diverging_run_skips_non_finite_steps_then_stops_without_saving(dataset, tmp_path):
    # Step 1 with this LR makes the weights about 1e30: every later gradient norm is NaN.
    run = train(
        dataset, tmp_path, "--learning-rate", "1e30", "--warmup-steps", "0", "--log-interval", "1",
        "--checkpoint-interval", "100", "--max-nonfinite-steps", "3",
        env={"SM_OUTPUT_DIR": str(tmp_path / "output")},
    )  # fmt: skip
    assert run.returncode != 0, run.output
    reason = (tmp_path / "output" / "failure").read_text()  # what SageMaker reports as FailureReason
    assert reason.startswith("trainstack-fault:user:nonfinite FloatingPointError: Training diverged: ")
    assert "Step 2: loss" in run.output and "gradient norm nan" in run.output
    assert "the update is skipped (1 of at most 3 in a row)" in run.output
    assert (
        "Training diverged: the loss or gradient norm was not finite in 3 consecutive steps (2-4"
        in run.output
    )
    grad_norms = parse_metrics(run.output)["train:grad_norm"]  # nan reaches SageMaker's charts
    assert (
        len(grad_norms) == 3 and math.isfinite(grad_norms[0]) and all(math.isnan(x) for x in grad_norms[1:])
    )
    assert not run.model_dir.exists() or not any(run.model_dir.iterdir())
    assert complete_steps(run.checkpoint_dir) == []


def test_non_finite_weights_are_never_checkpointed(dataset, tmp_path, reference_run):
    # A starting model with one infinite weight: every step is skipped, and its checkpoint refused.
    from safetensors.torch import load_file, save_file

    start = tmp_path / "start"
    shutil.copytree(reference_run.model_dir, start)
    weights = load_file(start / "model.safetensors")
    weights["model.layers.0.mlp.up_proj.weight"][0, 0] = math.inf
    save_file(weights, start / "model.safetensors", metadata={"format": "pt"})

    run = train(dataset, tmp_path, "--init-from", str(start), "--checkpoint-interval", "1")
    assert run.returncode != 0, run.output
    assert "The weights at step 1 are not finite, so no checkpoint is written" in run.output
    assert not list(run.checkpoint_dir.glob("step_*"))


def test_a_bad_token_id_seen_by_one_rank_ends_every_rank_with_the_same_sentence(tmp_path):
    data = tmp_path / "data"
    write_learnable_shards(data / "train", 8_000, seed=1)
    write_learnable_shards(data / "val", 4_000, seed=2)
    shard = data / "train" / "shard_00001.bin"  # the second shard: rank 1 scans it
    tokens = np.fromfile(shard, dtype="<u2")
    tokens[123] = 600  # the tiny preset's vocabulary is 512
    tokens.tofile(shard)

    run = train(data, tmp_path / "out")
    assert run.returncode != 0
    message = f"The train shard {shard} holds token id 600, not below the model's vocabulary size 512"
    assert run.output.count(message) == 1, run.output
    assert "gloo" not in run.output.lower(), run.output
    assert run.output.count("Traceback") == 1, run.output  # torchrun's own report; none of a rank


def test_a_resume_with_fewer_ranks_keeps_the_global_batch_and_the_data_position(
    dataset, tmp_path, reference_run
):
    checkpoints, (_, newest) = copy_reference_checkpoints(reference_run, tmp_path)
    one_rank = train(dataset, tmp_path, nproc=1)
    assert one_rank.returncode == 0, one_rank.output
    assert (
        f"Checkpoint {newest} was written by 2 data-parallel ranks, this run has 1: gradient accumulation 4 "
        "(instead of --grad-accum 2) keeps the global batch of 8 sequences" in one_rank.output
    )
    # The same samples per step, averaged in another order: equal up to float rounding.
    weights = load_weights(one_rank.model_dir)
    assert max_weight_difference(weights, load_weights(reference_run.model_dir)) < 1e-4
    # Validation covers the same samples whatever the number of ranks.
    [reference_val] = parse_metrics(reference_run.output)["validation:loss"][-1:]
    [val] = parse_metrics(one_rank.output)["validation:loss"]
    assert val == pytest.approx(reference_val, abs=2e-4)


def test_a_global_batch_the_new_ranks_cannot_keep_is_refused_unless_allowed(dataset, tmp_path, reference_run):
    checkpoints, (_, newest) = copy_reference_checkpoints(reference_run, tmp_path)
    before = file_digests(checkpoints)
    refused = train(dataset, tmp_path, "--micro-batch-size", "3", nproc=1)
    assert refused.returncode != 0, refused.output
    assert (
        f"Checkpoint {newest} was trained with a global batch of 8 sequences, not a multiple of 1 "
        "data-parallel ranks x --micro-batch-size 3: choose a micro-batch size that divides it, or pass "
        "--allow-global-batch-change true to continue with 6 sequences per step." in refused.output
    )
    assert file_digests(checkpoints) == before

    allowed = train(
        dataset, tmp_path, "--micro-batch-size", "3", "--allow-global-batch-change", "true", nproc=1
    )
    assert allowed.returncode == 0, allowed.output
    marker = json.loads((checkpoints / f"step_{MAX_STEPS - 10:09d}" / "COMPLETE").read_text())
    epoch, offset = marker["data_position"]
    assert (
        f"The global batch changes from 8 to 6 sequences at step 30; the data continues where the checkpoint "
        f"left it (epoch {epoch}, sample {offset} of its order)" in allowed.output
    )


def test_seq_len_beyond_the_presets_positions_raises_them_in_the_exported_config(tmp_path):
    data = tmp_path / "data"
    write_learnable_shards(data / "train", 8_000, seed=1)
    flags = list(TRAIN_FLAGS)
    flags[flags.index("--seq-len") + 1] = "600"  # tiny: 512 positions
    run = train(
        data, tmp_path / "out", "--val-dir", str(data / "train"), "--max-steps", "2",
        "--micro-batch-size", "1", "--grad-accum", "1",
        "--profile-steps", "2", "--profile-dir", str(tmp_path / "profile"), flags=flags,
    )  # fmt: skip
    assert run.returncode == 0, run.output
    assert "--seq-len 600 exceeds the model's max_position_embeddings 512: raised to 600" in run.output
    config = json.loads((run.model_dir / "config.json").read_text())
    assert config["max_position_embeddings"] == 600
    traces = sorted(p.name for p in (tmp_path / "profile").iterdir())
    assert traces == ["trace_steps_2-2_rank_0.json", "trace_steps_2-2_rank_1.json"]


def test_the_1b_preset_dry_run_holds_half_the_model_per_rank(tmp_path):
    """Built on the meta device, sharded, then materialized: no rank ever holds the whole model."""
    import subprocess

    result = subprocess.run(
        torchrun_command("--model-preset", "1b", "--dry-run", "--model-dir", str(tmp_path / "model")),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # Each report split at its own start: two ranks writing to one pipe may interleave a line's newline.
    reports = [dict(re.findall(r"(\w+)=(\d+)", report)) for report in result.stdout.split("dry_run ")[1:]]
    assert len(reports) == 2, result.stdout
    full = parameter_count(PRESETS["1b"]) * 4
    for report in reports:
        assert int(report["full_model_fp32_bytes"]) == full
        assert abs(int(report["parameter_bytes"]) - full / 2) < 0.01 * full
        assert int(report["peak_rss_bytes"]) <= full / 2 + 1.5 * GiB, (report, full)
