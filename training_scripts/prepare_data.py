"""Turn text files into the train/val token shards train.py reads.

    python prepare_data.py --input corpus/ --output data/ [--tokenizer DIR] [--val-fraction 0.05]

writes data/train/*.bin and data/val/*.bin (little-endian uint16 token ids), one
end-of-document token after each file. The default tokenizer is byte-level
(ids 0-255, end of document 256: fits every preset); `--tokenizer` takes a local
Hugging Face tokenizer directory. The last `--val-fraction` of each document's
tokens goes to val, so a single large file still yields a val split.
"""

import argparse
import sys
from pathlib import Path

import numpy as np

BYTE_EOS = 256
UINT16_LIMIT = 1 << 16


class ShardWriter:
    """Appends token arrays to numbered `.bin` files of at most `shard_tokens` tokens."""

    def __init__(self, directory: Path, shard_tokens: int):
        self.directory, self.shard_tokens = directory, shard_tokens
        directory.mkdir(parents=True, exist_ok=True)
        self.buffer: list[np.ndarray] = []
        self.buffered = self.shards = self.tokens = 0

    def write(self, tokens: np.ndarray) -> None:
        while len(tokens):
            room = self.shard_tokens - self.buffered
            self.buffer.append(tokens[:room])
            self.buffered += len(tokens[:room])
            tokens = tokens[room:]
            if self.buffered == self.shard_tokens:
                self.flush()

    def flush(self) -> None:
        if self.buffered:
            np.concatenate(self.buffer).astype("<u2").tofile(self.directory / f"shard_{self.shards:05d}.bin")
            self.shards, self.tokens = self.shards + 1, self.tokens + self.buffered
            self.buffer, self.buffered = [], 0


def byte_tokenizer(text: str) -> list[int]:
    return list(text.encode("utf-8")) + [BYTE_EOS]


def hf_tokenizer(directory: str):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    if len(tokenizer) > UINT16_LIMIT:
        sys.exit(
            f"--tokenizer {directory} has {len(tokenizer)} tokens; uint16 shards hold at most {UINT16_LIMIT}."
        )
    if tokenizer.eos_token_id is None:
        sys.exit(f"--tokenizer {directory} defines no end-of-sequence token.")
    return lambda text: tokenizer(text)["input_ids"] + [tokenizer.eos_token_id], len(tokenizer)


def text_files(inputs: list[str]) -> list[Path]:
    files = []
    for name in inputs:
        path = Path(name)
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.is_file())
        elif path.is_file():
            files.append(path)
        else:
            sys.exit(f"--input {name} is neither a file nor a directory.")
    if not files:
        sys.exit("--input holds no files.")
    return files


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--input", nargs="+", required=True, help="text files or directories of them")
    parser.add_argument("--output", required=True, help="writes OUTPUT/train and OUTPUT/val")
    parser.add_argument("--tokenizer", help="local Hugging Face tokenizer directory (default: bytes)")
    parser.add_argument("--val-fraction", type=float, default=0.05)
    parser.add_argument("--shard-tokens", type=int, default=100_000_000)
    args = parser.parse_args(argv)
    if not 0 <= args.val_fraction < 1:
        parser.error("--val-fraction must be in [0, 1).")

    tokenize, vocab_size = hf_tokenizer(args.tokenizer) if args.tokenizer else (byte_tokenizer, BYTE_EOS + 1)
    output = Path(args.output)
    train = ShardWriter(output / "train", args.shard_tokens)
    val = ShardWriter(output / "val", args.shard_tokens)
    for path in text_files(args.input):
        tokens = np.asarray(tokenize(path.read_text(encoding="utf-8", errors="replace")), dtype=np.int64)
        split = len(tokens) - int(len(tokens) * args.val_fraction)
        train.write(tokens[:split])
        val.write(tokens[split:])
    train.flush()
    val.flush()
    print(
        f"Wrote {train.tokens} train and {val.tokens} val tokens to {output}; vocabulary size {vocab_size} "
        f"(train.py --vocab-size {vocab_size} if the preset's is smaller)."
    )


if __name__ == "__main__":
    main()
