"""Generated 12x12 grey images of four classes (a bright bar: horizontal, vertical, or a diagonal, on noise),
as the train and test channels of examples/image-classifier/train.py.

    python make_images.py DIR [--train 512] [--test 256]   # DIR/train/images.pt, DIR/test/images.pt
"""

import argparse
from pathlib import Path

import torch

SIZE = 12


def images(count: int, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 4, (count,), generator=generator)
    pictures = torch.rand(count, 1, SIZE, SIZE, generator=generator) * 0.5
    positions = torch.randint(2, SIZE - 2, (count,), generator=generator)
    line = torch.arange(SIZE)
    for index, (label, at) in enumerate(zip(labels.tolist(), positions.tolist(), strict=True)):
        if label == 0:
            pictures[index, 0, at, :] += 1
        elif label == 1:
            pictures[index, 0, :, at] += 1
        elif label == 2:
            pictures[index, 0, line, line] += 1
        else:
            pictures[index, 0, line, SIZE - 1 - line] += 1
    return {"images": pictures, "labels": labels}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--train", type=int, default=512)
    parser.add_argument("--test", type=int, default=256)
    args = parser.parse_args()
    for channel, count, seed in (("train", args.train, 1), ("test", args.test, 2)):
        (args.directory / channel).mkdir(parents=True, exist_ok=True)
        torch.save(images(count, seed), args.directory / channel / "images.pt")


if __name__ == "__main__":
    main()
