"""Generated token sequences (counting up by a step of 1 to 3 from a random start, modulo 32, with 5 % noise)
as the train and test channels of examples/hf-trainer/train.py.

    python make_sequences.py DIR [--train 256] [--test 64]   # DIR/{train,test}/sequences.pt
"""

import argparse
from pathlib import Path

import torch

VOCABULARY, LENGTH = 32, 16


def sequences(count: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, VOCABULARY, (count, 1), generator=generator)
    strides = torch.randint(1, 4, (count, 1), generator=generator)
    tokens = (starts + strides * torch.arange(LENGTH)) % VOCABULARY
    noise = torch.rand(count, LENGTH, generator=generator) < 0.05
    return torch.where(noise, torch.randint(0, VOCABULARY, (count, LENGTH), generator=generator), tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--train", type=int, default=256)
    parser.add_argument("--test", type=int, default=64)
    args = parser.parse_args()
    for channel, count, seed in (("train", args.train, 1), ("test", args.test, 2)):
        (args.directory / channel).mkdir(parents=True, exist_ok=True)
        torch.save(sequences(count, seed), args.directory / channel / "sequences.pt")


if __name__ == "__main__":
    main()
