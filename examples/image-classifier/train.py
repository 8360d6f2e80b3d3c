"""A small CNN that tells four kinds of generated images apart, trained through trainstack's runtime library.

    python make_images.py data/                     # data/train/images.pt, data/test/images.pt
    SM_CHANNEL_TRAIN=data/train \\
        torchrun --nproc_per_node=2 train.py --max_steps 60 --model-dir out/model --checkpoint-dir out/ckpt

Its evaluation (accuracy on data/test) is evaluate_model.py, the profile's evaluation entry point.

On the platform the channels and the platform's flags (checkpoint store, interval, watchdog) come from the
run; the team's hyperparameters (max_steps, learning_rate, batch_size, seed) arrive as `--name value`.
The data order is a function of the step, so a run resumed from a checkpoint sees the same samples in the
same order as one that never stopped, and reaches the same weights.
"""

import sys

import torch
import torch.nn.functional as F
import trainstack_runtime as ts
from safetensors.torch import save_file
from torch.nn.parallel import DistributedDataParallel

CLASSES = 4


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.head = torch.nn.Linear(16, CLASSES)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        hidden = F.max_pool2d(F.relu(self.conv1(images)), 2)
        hidden = F.relu(self.conv2(hidden))
        return self.head(hidden.mean(dim=(2, 3)))


def batch_indices(step: int, samples: int, batch_size: int, seed: int, rank: int, world: int) -> torch.Tensor:
    """This rank's share of step `step`'s global batch: a fixed permutation per epoch, read in order."""
    start = step * batch_size * world
    epoch, offset = divmod(start, samples)
    order = torch.randperm(samples, generator=torch.Generator().manual_seed(seed + epoch))
    global_batch = order.roll(-offset)[: batch_size * world]
    return global_batch[rank * batch_size : (rank + 1) * batch_size]


@torch.no_grad()
def accuracy(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor) -> float:
    return (model(images).argmax(dim=1) == labels).float().mean().item()


def train(job: ts.Job) -> None:
    max_steps = job.hyperparameter("max_steps", 60, int)
    batch_size = job.hyperparameter("batch_size", 16, int)
    seed = job.hyperparameter("seed", 0, int)
    torch.manual_seed(seed)  # the same initial weights on every rank
    data = torch.load(job.channel("train") / "images.pt", weights_only=True)
    images, labels = data["images"], data["labels"]

    model = SmallCNN()
    optimizer = torch.optim.AdamW(model.parameters(), lr=job.hyperparameter("learning_rate", 3e-3, float))
    checkpoints = ts.Checkpoints(job, model, optimizer)
    metrics = ts.Metrics(job, "SmallCNN")
    parallel = DistributedDataParallel(model)
    job.start_watchdog()

    step = checkpoints.resume()
    while step < max_steps:
        chosen = batch_indices(step, len(labels), batch_size, seed, job.rank, job.world_size)
        loss = F.cross_entropy(parallel(images[chosen]), labels[chosen])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        stop = job.stop_reason()  # SIGTERM or a training plan's end, on any rank
        if stop or checkpoints.due(step):
            checkpoints.save(step, blocking=bool(stop))
        metrics.log(step, {"train/loss": loss.item()})
        job.step_completed(step)
        if stop == ts.STOP_PLAN_ENDING:
            raise job.end_for_plan(step)
        if stop:
            metrics.close()
            return
    checkpoints.wait()
    metrics.close()
    if job.is_main:
        job.model_dir.mkdir(parents=True, exist_ok=True)
        save_file(model.state_dict(), job.model_dir / "model.safetensors")


if __name__ == "__main__":
    sys.exit(ts.run(train))
