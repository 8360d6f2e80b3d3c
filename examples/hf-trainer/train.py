"""A tiny GPT-2 trained with Hugging Face's `Trainer` on generated token sequences, through trainstack's
runtime library (trainstack_runtime.hf_trainer.PlatformTrainer).

    python make_sequences.py data/              # data/train/sequences.pt, data/test/sequences.pt
    SM_CHANNEL_TRAIN=data/train \\
        torchrun --nproc_per_node=1 train.py --max_steps 40 --model-dir out/model --checkpoint-dir out/ckpt

The model is built from a config (no download). Its evaluation, next-token accuracy on data/test, is
evaluate_model.py, the profile's evaluation entry point.
"""

import sys

import torch
import trainstack_runtime as ts
from trainstack_runtime.hf_trainer import PlatformTrainer
from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments


class Sequences(torch.utils.data.Dataset):
    def __init__(self, tokens: torch.Tensor):
        self.tokens = tokens

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.tokens[index], "labels": self.tokens[index]}


@torch.no_grad()
def next_token_accuracy(model: torch.nn.Module, tokens: torch.Tensor) -> float:
    model.eval()
    predicted = model(input_ids=tokens).logits[:, :-1].argmax(dim=-1)
    return (predicted == tokens[:, 1:]).float().mean().item()


def train(job: ts.Job) -> None:
    seed = job.hyperparameter("seed", 0, int)
    torch.manual_seed(seed)
    tokens = torch.load(job.channel("train") / "sequences.pt", weights_only=True)
    config = GPT2Config(
        vocab_size=int(tokens.max()) + 1, n_positions=tokens.shape[1], n_embd=32, n_layer=2, n_head=2,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    model = GPT2LMHeadModel(config)
    arguments = TrainingArguments(
        output_dir=str(job.model_dir),
        max_steps=job.hyperparameter("max_steps", 40, int),
        per_device_train_batch_size=job.hyperparameter("batch_size", 8, int),
        learning_rate=job.hyperparameter("learning_rate", 3e-3, float),
        lr_scheduler_type="cosine",
        warmup_steps=5,
        logging_steps=5,
        seed=seed,
        use_cpu=job.device.type == "cpu",
        ddp_find_unused_parameters=False,
        disable_tqdm=True,
    )
    trainer = PlatformTrainer(job, model=model, args=arguments, train_dataset=Sequences(tokens))
    trainer.train()
    if trainer.stopped:  # SIGTERM: the checkpoint resumes the run
        return
    if job.is_main:
        trainer.save_model(str(job.model_dir))


if __name__ == "__main__":
    sys.exit(ts.run(train))
