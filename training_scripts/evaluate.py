"""Evaluate a trained model on a held-out token set: the pipeline's evaluation job (docs/registry.md).

    python evaluate.py --model-dir-in model/ --eval-dir eval/ --out-dir out/ --seq-len 128

It runs in the training image as the job's program (hyperparameter sagemaker_program), with the run's
hyperparameters as flags (the unknown ones are ignored). Rank 0 does the work: one process reads the
model saved by train.py (model.safetensors + config.json, or the model.tar.gz of a GZIP output), the
first --max-eval-tokens tokens of the eval channel in --seq-len samples, and writes `evaluation.json`
(EVALUATION_FILE) into the job's model dir, which SageMaker uploads (CompressionType NONE: as it is),
and one metric line (metrics.format_evaluation_line) that the job's MetricDefinitions read.
"""

import argparse
import json
import math
import os
import sys
import tarfile
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from data import TokenDataset, UserError
from faults import CONFIG, EXIT_USER_ERROR, report
from metrics import EVALUATION_DEFAULT_SEQ_LEN, EVALUATION_FILE, METRICS_KEY, format_evaluation_line

BATCH_SAMPLES = 8


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model-dir-in", default=env("SM_CHANNEL_MODEL"), help="defaults to SM_CHANNEL_MODEL"
    )
    parser.add_argument("--eval-dir", default=env("SM_CHANNEL_EVAL"), help="defaults to SM_CHANNEL_EVAL")
    parser.add_argument("--out-dir", default=env("SM_MODEL_DIR", "/opt/ml/model"))
    parser.add_argument("--seq-len", "--seq_len", type=int, default=EVALUATION_DEFAULT_SEQ_LEN)
    parser.add_argument("--max-eval-tokens", "--max_eval_tokens", type=int, default=1_000_000)
    parser.add_argument("--eval-manifest-hash", "--eval_manifest_hash", default="")
    return parser.parse_known_args(argv)[0]


def model_files(directory: Path, scratch: Path) -> Path:
    """The folder holding config.json: the channel itself, or its model.tar.gz unpacked into `scratch`."""
    if (directory / "config.json").exists():
        return directory
    archive = directory / "model.tar.gz"
    if not archive.exists():
        raise UserError(f"The model channel {directory} holds neither config.json nor model.tar.gz.")
    with tarfile.open(archive) as opened:
        opened.extractall(scratch, filter="data")
    return scratch


@torch.no_grad()
def mean_loss(model: torch.nn.Module, dataset: TokenDataset, samples: int) -> float:
    """Mean next-token cross-entropy over the first `samples` samples (every token weighs the same)."""
    total = 0.0
    for start in range(0, samples, BATCH_SAMPLES):
        batch = dataset.batch(torch.arange(start, min(start + BATCH_SAMPLES, samples)).numpy())
        logits = model(input_ids=batch[:, :-1]).logits.float()
        total += F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten(), reduction="sum").item()
    return total / (samples * dataset.seq_len)


def evaluate(args: argparse.Namespace) -> dict:
    from transformers import AutoModelForCausalLM

    if not args.model_dir_in or not args.eval_dir:
        raise UserError(
            "The evaluation needs a 'model' and an 'eval' channel (SM_CHANNEL_MODEL, SM_CHANNEL_EVAL)."
        )
    dataset = TokenDataset(args.eval_dir, args.seq_len, "eval")
    samples = max(1, min(len(dataset), args.max_eval_tokens // args.seq_len))
    with tempfile.TemporaryDirectory() as scratch:
        model = AutoModelForCausalLM.from_pretrained(model_files(Path(args.model_dir_in), Path(scratch)))
        model.eval()
        loss = mean_loss(model, dataset, samples)
    tokens = samples * args.seq_len
    if not math.isfinite(loss):
        raise UserError(f"The evaluation loss is {loss} over {tokens} tokens: the model diverged.")
    perplexity = math.exp(min(loss, 700.0))  # the largest exp() a float holds is near exp(709)
    return {
        METRICS_KEY: {
            "loss": {"value": loss},
            "perplexity": {"value": perplexity},
            "tokens_evaluated": {"value": tokens},
        },
        "eval_manifest_hash": args.eval_manifest_hash,
        "code_version": os.environ.get("TRAINSTACK_CODE_VERSION", "unknown"),
    }


def main(argv: list[str] | None = None) -> int:
    if int(os.environ.get("RANK", "0")) != 0:
        return 0  # one process evaluates; torchrun's other ranks have nothing to do
    args = parse_args(argv)
    try:
        evaluation = evaluate(args)
    except UserError as error:
        report(CONFIG, str(error))
        return EXIT_USER_ERROR
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / EVALUATION_FILE).write_text(json.dumps(evaluation, indent=2) + "\n")
    metrics = evaluation[METRICS_KEY]
    print(
        format_evaluation_line(
            metrics["loss"]["value"], metrics["perplexity"]["value"], metrics["tokens_evaluated"]["value"]
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
