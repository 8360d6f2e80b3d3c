"""The examples under examples/ (not the built-in Llama) on trainstack's runtime library, as a team runs them:
killed after a checkpoint (the hang drill stops a rank for good, then every process is killed, as with a
lost instance), resumed through the library's checkpoints to the weights of an uninterrupted run, and
writing their own evaluation metric. Real CPU runs (torchrun, gloo): the image classifier on 2 processes,
the Hugging Face Trainer on 1. The uninterrupted run trains beside the killed one."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import torch

from tests.training.harness import REPO_ROOT, SCRIPTS, Background, load_weights, max_weight_difference
from tests.training.harness import torchrun_command as torchrun

EXAMPLES = REPO_ROOT / "examples"
# The library from training_scripts/ (in the image: beside the team's code); one thread per process.
ENV = {
    "PYTHONPATH": os.pathsep.join(filter(None, [str(SCRIPTS), os.environ.get("PYTHONPATH")])),
    "OMP_NUM_THREADS": "1",
}


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def channels(root: Path, make, **counts) -> dict:
    """The example's generated train and test channels under `root`, as SM_CHANNEL_* variables."""
    env = {}
    for seed, (channel, count) in enumerate(counts.items(), start=1):
        (root / channel).mkdir(parents=True)
        make(root / channel, count, seed)
        env[f"SM_CHANNEL_{channel.upper()}"] = str(root / channel)
    return env


def command(script: Path, out: Path, flags: list[str], nproc: int) -> list[str]:
    dirs = ["--model-dir", str(out / "model"), "--checkpoint-dir", str(out / "checkpoints")]
    return torchrun(*flags, *dirs, nproc=nproc, script=script)


def killed_resumed_and_uninterrupted(
    tmp_path: Path, script: Path, flags: list[str], env: dict, nproc: int, hang_rank: int
) -> tuple[Path, Path, str]:
    """The model dirs of a run killed after step 15's checkpoint and resumed, and of an uninterrupted run;
    the resumed run's output."""
    hang = ["--inject-hang-at-step", "16", "--inject-hang-rank", str(hang_rank)]
    uninterrupted = Background(
        None,
        tmp_path / "uninterrupted",
        command=command(script, tmp_path / "uninterrupted", flags, nproc),
        env=env,
    )
    killed_out = tmp_path / "killed"
    killed = Background(
        None, killed_out, command=command(script, killed_out, [*flags, *hang], nproc), env=env
    )
    complete = killed_out / "checkpoints" / "step_000000015" / "COMPLETE"
    killed.wait_for(
        lambda: complete.exists() and "stops before step 16 for good" in killed.output(), "the hang"
    )
    killed.kill_all()
    killed.finish()
    assert uninterrupted.finish() == 0, uninterrupted.output()
    resumed = subprocess.run(
        command(script, killed_out, flags, nproc),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )
    output = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, output
    assert f"Resumed from {killed_out / 'checkpoints' / 'step_000000015'} (step 15)" in output, output
    return killed_out / "model", uninterrupted.model_dir, output


def evaluation(model_dir: Path, output: str) -> float:
    """The example's own metric in its evaluation output, and the line the evaluation job's metrics read."""
    accuracy = json.loads((model_dir / "evaluation.json").read_text())["language_model_metrics"]["accuracy"][
        "value"
    ]
    assert f"eval_accuracy={accuracy:.6f}" in output
    return accuracy


def test_the_image_classifier_resumes_after_a_kill_to_the_uninterrupted_weights(tmp_path):
    make = load(EXAMPLES / "image-classifier" / "make_images.py")
    env = {
        **ENV,
        **channels(
            tmp_path / "data",
            lambda d, n, s: torch.save(make.images(n, s), d / "images.pt"),
            train=512,
            test=256,
        ),
    }
    flags = ["--max_steps", "40", "--checkpoint-interval", "5", "--learning_rate", "0.01"]
    resumed, uninterrupted, output = killed_resumed_and_uninterrupted(
        tmp_path, EXAMPLES / "image-classifier" / "train.py", flags, env, nproc=2, hang_rank=1
    )
    difference = max_weight_difference(load_weights(resumed), load_weights(uninterrupted))
    assert difference == 0.0
    assert evaluation(resumed, output) > 0.5  # four classes: a guess scores 0.25


def test_the_hugging_face_trainer_resumes_after_a_kill_to_the_uninterrupted_weights(tmp_path):
    make = load(EXAMPLES / "hf-trainer" / "make_sequences.py")
    env = {
        **ENV,
        **channels(
            tmp_path / "data",
            lambda d, n, s: torch.save(make.sequences(n, s), d / "sequences.pt"),
            train=256,
            test=64,
        ),
    }
    flags = ["--max_steps", "30", "--checkpoint-interval", "5"]
    resumed, uninterrupted, output = killed_resumed_and_uninterrupted(
        tmp_path, EXAMPLES / "hf-trainer" / "train.py", flags, env, nproc=1, hang_rank=0
    )
    difference = max_weight_difference(load_weights(resumed), load_weights(uninterrupted))
    assert difference == 0.0
    assert evaluation(resumed, output) > 0.1  # 32 tokens: a guess scores about 0.03
