"""train.py trained for real: torchrun, 2 CPU processes, gloo, the tiny preset."""

from __future__ import annotations

import hashlib
import shutil
import signal

import pytest
import torch
from rank_health import SLOW_FACTOR
from transformers import AutoModelForCausalLM

from tests.training.harness import (
    CHECKPOINT_INTERVAL,
    MAX_STEPS,
    Background,
    load_weights,
    max_weight_difference,
    train,
)
from training_scripts.metrics import CHECKPOINT_PAUSE, SLOW_HOST_LINE, parse_metrics


def complete_steps(checkpoint_dir) -> list[int]:
    return sorted(int(p.parent.name.removeprefix("step_")) for p in checkpoint_dir.glob("step_*/COMPLETE"))


def file_digests(directory) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_loss_falls_and_the_model_loads_with_transformers(reference_run):
    metrics = parse_metrics(reference_run.output)
    train_loss = metrics["train:loss"]
    assert len(train_loss) == MAX_STEPS // 5
    assert train_loss[-1] < 0.5 * train_loss[0], train_loss
    assert len(metrics["validation:loss"]) == 2
    assert all(value > 0 for value in metrics["train:tokens_per_second"])
    assert metrics["train:mfu_percent"] == []  # no MFU on CPU
    # A clean run flags no slow host: every interval's slowest rank stays under the factor (rank_health.py).
    assert not SLOW_HOST_LINE.search(reference_run.output)
    assert 0 < max(metrics["train:slowest_rank_ratio"]) < SLOW_FACTOR, metrics["train:slowest_rank_ratio"]

    model = AutoModelForCausalLM.from_pretrained(reference_run.model_dir)
    assert type(model).__name__ == "LlamaForCausalLM"
    pattern = torch.arange(3, 40).unsqueeze(0)  # the dataset's repeating sequence
    predicted = model(input_ids=pattern).logits.argmax(-1)
    assert (predicted[0, :-1] == pattern[0, 1:]).float().mean() > 0.9


@pytest.mark.newer_stack  # FSDP2 in torch 2.5.1 needs CUDA
def test_ddp_and_fsdp2_follow_the_same_loss_trajectory(dataset, tmp_path, reference_run):
    # smddp is not installed here: the run falls back to gloo and says so. Recomputing activations
    # in backward must not change the result either.
    fsdp = train(
        dataset, tmp_path, "--strategy", "smddp", "--parallelism", "fsdp",
        "--activation-checkpointing", "true",
    )  # fmt: skip
    assert fsdp.returncode == 0, fsdp.output
    assert "SMDDP (smdistributed.dataparallel) needs the SageMaker image" in fsdp.output
    ddp_loss = parse_metrics(reference_run.output)["train:loss"]
    fsdp_loss = parse_metrics(fsdp.output)["train:loss"]
    assert len(ddp_loss) == len(fsdp_loss)
    for a, b in zip(fsdp_loss, ddp_loss, strict=True):
        assert abs(a - b) <= 1e-3 * max(abs(b), 1), (fsdp_loss, ddp_loss)
    # Nor under FSDP, whose collectives run inside forward and backward.
    assert not SLOW_HOST_LINE.search(fsdp.output)
    assert max(parse_metrics(fsdp.output)["train:slowest_rank_ratio"]) < SLOW_FACTOR
    assert max_weight_difference(load_weights(fsdp.model_dir), load_weights(reference_run.model_dir)) < 1e-4


def test_kill_9_then_resume_reaches_the_weights_of_an_uninterrupted_run(dataset, tmp_path, reference_run):
    # Async checkpoints here, synchronous in the reference: both paths must hold the same state.
    killed = Background(dataset, tmp_path, "--async-checkpoint", "true")
    killed.wait_for(
        lambda: 2 * CHECKPOINT_INTERVAL in complete_steps(killed.checkpoint_dir), "second checkpoint"
    )
    killed.kill_all()
    assert killed.finish() == -signal.SIGKILL
    assert not (killed.model_dir / "model.safetensors").exists(), "the run finished before it was killed"
    newest = complete_steps(killed.checkpoint_dir)[-1]
    assert newest < MAX_STEPS

    resumed = train(dataset, tmp_path, "--async-checkpoint", "true")
    assert resumed.returncode == 0, resumed.output
    assert f"Resumed from {killed.checkpoint_dir / f'step_{newest:09d}'} (step {newest})" in resumed.output
    assert not list(killed.checkpoint_dir.glob("*.tmp"))
    difference = max_weight_difference(load_weights(resumed.model_dir), load_weights(reference_run.model_dir))
    assert difference <= 1e-6


def test_sigterm_leaves_a_complete_checkpoint_before_exit(dataset, tmp_path):
    stopped = Background(dataset, tmp_path, "--max-steps", "100000", "--checkpoint-interval", "100000")
    stopped.wait_for(lambda: "step=10/" in stopped.output(), "step 10")
    stopped.process.send_signal(signal.SIGTERM)  # to torchrun, which passes it to every rank
    stopped.finish()
    steps = complete_steps(stopped.checkpoint_dir)
    assert len(steps) == 1 and steps[0] >= 10, stopped.output()
    assert f"Stopped by SIGTERM at step {steps[0]}" in stopped.output()
    assert not list(stopped.checkpoint_dir.glob("*.tmp"))
    # How long the loop stood still for it: the run report's goodput ledger counts it as saving.
    pause = CHECKPOINT_PAUSE.search(stopped.output())
    assert pause and int(pause.group(1)) == steps[0] and float(pause.group(2)) > 0, stopped.output()


def test_a_corrupt_newest_checkpoint_is_skipped_for_the_previous_one(dataset, tmp_path, reference_run):
    # The reference run kept its last two checkpoints; a rerun of the finished job resumes from the newest.
    checkpoints = tmp_path / "checkpoints"
    shutil.copytree(reference_run.checkpoint_dir, checkpoints)
    previous, newest = complete_steps(checkpoints)
    for shard in (checkpoints / f"step_{newest:09d}").glob("*.distcp"):
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    partial = checkpoints / f"step_{newest + 5:09d}"  # a save that never completed: no marker
    shutil.copytree(checkpoints / f"step_{newest:09d}", partial)
    (partial / "COMPLETE").unlink()

    rerun = train(dataset, tmp_path)
    assert rerun.returncode == 0, rerun.output
    assert f"Checkpoint {checkpoints / f'step_{newest:09d}'} could not be loaded" in rerun.output
    assert f"Resumed from {checkpoints / f'step_{previous:09d}'} (step {previous})" in rerun.output
    difference = max_weight_difference(load_weights(rerun.model_dir), load_weights(reference_run.model_dir))
    assert difference <= 1e-6


def test_a_new_run_starts_from_another_runs_checkpoint_and_its_retry_continues_its_own(
    dataset, tmp_path, reference_run
):
    # The reference run stands for run A (newest checkpoint: step 30 of 40) and for the uninterrupted run.
    source = reference_run.checkpoint_dir
    source_files = file_digests(source)
    newest = complete_steps(source)[-1]
    resume_flags = ("--resume-from", str(source), "--checkpoint-interval", "5")

    started = train(dataset, tmp_path, *resume_flags)
    assert started.returncode == 0, started.output
    assert f"Resumed from {source / f'step_{newest:09d}'} (step {newest})" in started.output
    assert len(parse_metrics(started.output)["train:loss"]) == (MAX_STEPS - newest) // 5  # no step redone
    assert complete_steps(started.checkpoint_dir) == [newest + 5]
    assert file_digests(source) == source_files
    difference = max_weight_difference(load_weights(started.model_dir), load_weights(reference_run.model_dir))
    assert difference <= 1e-6

    # A retry of that run gets the same resume channel: its own checkpoint (step 35) wins.
    retry = train(dataset, tmp_path, *resume_flags)
    assert retry.returncode == 0, retry.output
    assert f"the resume source {source} is ignored" in retry.output
    assert (
        f"Resumed from {started.checkpoint_dir / f'step_{newest + 5:09d}'} (step {newest + 5})"
        in retry.output
    )
    assert file_digests(source) == source_files
    difference = max_weight_difference(load_weights(retry.model_dir), load_weights(reference_run.model_dir))
    assert difference <= 1e-6
