"""The image classifier's evaluation entry point: its accuracy on the evaluation set, the metric the
registry's gate compares (the profile's `evaluation: {entry_point: evaluate_model.py, metric: {name:
accuracy, goal: maximize, tolerance: 0.01}}`, docs/registry.md).

    SM_CHANNEL_MODEL=out/model SM_CHANNEL_EVAL=data/test SM_MODEL_DIR=out/eval python evaluate_model.py

The evaluation job hands it the run's model (`model` channel) and the profile's evaluation set (`eval`);
`evaluation.json` and the `eval_accuracy=` line go where the registry reads them (write_evaluation).
"""

import os
import sys
from pathlib import Path

import torch
import trainstack_runtime as ts
from safetensors.torch import load_file
from train import SmallCNN, accuracy


def main() -> int:
    if int(os.environ.get("RANK", "0")) != 0:
        return 0  # one process evaluates; the launcher's other ranks have nothing to do
    model = SmallCNN()
    model.load_state_dict(load_file(Path(os.environ["SM_CHANNEL_MODEL"]) / "model.safetensors"))
    test = torch.load(Path(os.environ["SM_CHANNEL_EVAL"]) / "images.pt", weights_only=True)
    ts.write_evaluation({"accuracy": accuracy(model, test["images"], test["labels"])})
    return 0


if __name__ == "__main__":
    sys.exit(main())
