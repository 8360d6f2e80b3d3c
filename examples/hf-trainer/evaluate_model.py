"""The Hugging Face example's evaluation entry point: next-token accuracy on the evaluation set, the metric
the registry's gate compares (the profile's `evaluation: {entry_point: evaluate_model.py, metric: {name:
accuracy, goal: maximize, tolerance: 0.01}}`, docs/registry.md).

    SM_CHANNEL_MODEL=out/model SM_CHANNEL_EVAL=data/test SM_MODEL_DIR=out/eval python evaluate_model.py

The evaluation job hands it the run's model (`model` channel: the Trainer's saved model) and the profile's
evaluation set (`eval`); `evaluation.json` and the `eval_accuracy=` line go where the registry reads them.
"""

import os
import sys
from pathlib import Path

import torch
import trainstack_runtime as ts
from train import next_token_accuracy
from transformers import GPT2LMHeadModel


def main() -> int:
    if int(os.environ.get("RANK", "0")) != 0:
        return 0  # one process evaluates; the launcher's other ranks have nothing to do
    model = GPT2LMHeadModel.from_pretrained(os.environ["SM_CHANNEL_MODEL"])
    test = torch.load(Path(os.environ["SM_CHANNEL_EVAL"]) / "sequences.pt", weights_only=True)
    ts.write_evaluation({"accuracy": next_token_accuracy(model, test)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
