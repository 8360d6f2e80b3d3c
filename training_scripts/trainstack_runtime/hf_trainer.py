"""A Hugging Face `Trainer` on the platform: its checkpoints, stops, watchdog and metrics are the library's.

    trainer = PlatformTrainer(job, model=model, args=TrainingArguments(...), train_dataset=dataset)
    trainer.train()

For the image's transformers (4.44.2). What changes against a plain Trainer:
- checkpoints: the model, optimizer and LR scheduler go to the profile's store through `Checkpoints` at the
  profile's interval and on a stop (SIGTERM, a training plan's end), and a run resumes from the newest
  complete one; the Trainer's own saves are turned off (save_strategy "no"), as are its reporting
  integrations (report_to "none": the library's `Metrics` write TensorBoard and MLflow);
- the data order: training samples come from a stream indexed by the global step (a permutation of the
  dataset per pass, `seed`), so a resumed run reads on where the checkpoint stopped, as an uninterrupted
  run would (the Trainer's own skip of batches needs its own checkpoint format);
- the watchdog hears of every optimizer step.
"""

from __future__ import annotations

import torch
from capacity_block import STOP_PLAN_ENDING
from trainstack_runtime.checkpoints import Checkpoints
from trainstack_runtime.job import Job
from trainstack_runtime.reporting import Metrics
from transformers import IntervalStrategy, Trainer, TrainerCallback

# The Trainer's log keys, as the library's tags.
LOG_TAGS = {"loss": "train/loss", "learning_rate": "train/learning_rate", "grad_norm": "train/grad_norm"}


class StepStream(torch.utils.data.Sampler):
    """Dataset indices from the global step on: pass p reads a fixed permutation of the dataset (seed + p)."""

    def __init__(self, size: int, samples_per_step: int, steps: int, seed: int, trainer: Trainer):
        self.size, self.samples_per_step, self.steps, self.seed = size, samples_per_step, steps, seed
        self.trainer = trainer

    def __len__(self) -> int:
        return self.steps * self.samples_per_step

    def __iter__(self):
        # Read when iteration starts: after the resume (on_train_begin) has set the global step.
        start = self.trainer.state.global_step * self.samples_per_step
        for position in range(start, len(self)):
            epoch, offset = divmod(position, self.size)
            if offset == 0 or position == start:
                order = torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed + epoch))
            yield int(order[offset])


class PlatformTrainer(Trainer):
    """Trainer's own arguments, by keyword, after the job. After `train()`, `stopped` is the stop that
    ended it early (STOP_SIGTERM: export nothing, the checkpoint resumes it), 0 where it ran to the end."""

    def __init__(self, job: Job, **kwargs):
        kwargs["args"].save_strategy, kwargs["args"].report_to = IntervalStrategy.NO, []
        super().__init__(**kwargs)
        self.job, self.stopped = job, 0
        self.add_callback(_Platform(self))

    def train(self, **kwargs):
        result = super().train(**kwargs)
        if self.stopped == STOP_PLAN_ENDING:
            raise self.job.end_for_plan(self.state.global_step)
        return result

    def _get_train_sampler(self) -> torch.utils.data.Sampler:
        args = self.args
        if args.max_steps <= 0:
            raise ValueError(
                "PlatformTrainer needs TrainingArguments.max_steps: its data order runs by step."
            )
        per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
        return StepStream(len(self.train_dataset), per_step, args.max_steps, args.seed, self)


class _Platform(TrainerCallback):
    def __init__(self, trainer: PlatformTrainer):
        self.trainer, self.job = trainer, trainer.job
        self.checkpoints: Checkpoints | None = None
        self.metrics: Metrics | None = None

    def on_train_begin(self, args, state, control, model=None, optimizer=None, lr_scheduler=None, **kwargs):
        self.checkpoints = Checkpoints(self.job, model, optimizer, {"scheduler": lr_scheduler})
        self.metrics = Metrics(self.job, type(model).__name__, args.to_sanitized_dict())
        self.job.start_watchdog()
        state.global_step = self.checkpoints.resume()
        self.trainer._globalstep_last_logged = state.global_step  # the next logged loss: since here

    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step
        stop = self.job.stop_reason()
        if stop or self.checkpoints.due(step):
            self.checkpoints.save(step, blocking=bool(stop))
        self.job.step_completed(step)
        if stop:
            control.should_training_stop = True
            self.trainer.stopped = stop

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.metrics.log(state.global_step, {LOG_TAGS[key]: logs[key] for key in LOG_TAGS if key in logs})

    def on_train_end(self, args, state, control, **kwargs):
        self.checkpoints.wait()
        self.metrics.close()
