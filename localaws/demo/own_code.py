"""`make demo CODE=DIR ENTRY=FILE`: the retraining runs a team's own code, as `trainstack start --code DIR
--entry FILE` starts it (trainstack.team_code: packed, uploaded by its sha256 to the team's code prefix).

The demo's data comes from the code directory itself: DIR holds exactly one data generator, a `make_*.py`
script run as `python make_<name>.py OUT` that writes the train channel's files under OUT/train/ and the
held-out set under OUT/test/ (examples/image-classifier/make_images.py,
examples/hf-trainer/make_sequences.py). The held-out set is the registry's evaluation set where the profile
has a registry: block."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from localaws.demo.target import DemoRefusal
from trainstack.commands.start import default_entry
from trainstack.profiles import Profile

GENERATOR_GLOB = "make_*.py"
TRAIN_CHANNEL, HELD_OUT = "train", "test"


@dataclass(frozen=True)
class DemoCode:
    directory: Path
    entry: str
    generator: Path


def demo_code(directory: Path | None, entry: str | None, profile: Profile) -> DemoCode | None:
    """--code DIR and --entry FILE checked before anything runs (DemoRefusal); None without --code."""
    if directory is None:
        if entry is not None:
            raise DemoRefusal("--entry names a file of the team's code: give --code DIR too")
        return None
    if not directory.is_dir():
        raise DemoRefusal(f"--code {directory}: not a directory")
    if profile.strategy != "torchrun":
        raise DemoRefusal(
            f"--profile {profile.name}: strategy {profile.strategy}; the demo runs a team's own code with "
            "torchrun profiles only (the training toolkit's other launchers need SSH between instances)"
        )
    chosen = entry or default_entry(profile)
    if not (directory / chosen).is_file():
        raise DemoRefusal(f"--entry {chosen}: not a file of {directory}")
    evaluation = profile.evaluation.entry_point if profile.evaluation else None
    if profile.registry is not None and evaluation is None:
        raise DemoRefusal(
            f"--profile {profile.name}: its registry evaluates with the image's Llama evaluator, "
            "which cannot evaluate the team's model; name a profile whose evaluation: names an entry_point "
            "of the code directory, or one without a registry: block"
        )
    if evaluation is not None and not (directory / evaluation).is_file():
        raise DemoRefusal(
            f"--profile {profile.name}: its evaluation entry_point {evaluation} is not a file of {directory}"
        )
    generators = sorted(directory.glob(GENERATOR_GLOB))
    if len(generators) != 1:
        found = ", ".join(path.name for path in generators) or "none"
        raise DemoRefusal(
            f"--code {directory}: the demo needs exactly one data generator {GENERATOR_GLOB} in it, run as "
            f"`python make_<name>.py OUT` writing OUT/{TRAIN_CHANNEL}/ and OUT/{HELD_OUT}/ (found: {found})"
        )
    return DemoCode(directory, chosen, generators[0])


def generate_data(code: DemoCode, workdir: Path) -> Path:
    """The generator's dataset under <workdir>/dataset; DemoRefusal where it fails or writes no train."""
    dataset = workdir / "dataset"
    generated = subprocess.run([sys.executable, str(code.generator), str(dataset)], stdout=subprocess.DEVNULL)
    if generated.returncode != 0:
        raise DemoRefusal(
            f"--code {code.directory}: {code.generator.name} ended with exit code {generated.returncode}"
        )
    if not any((dataset / TRAIN_CHANNEL).glob("*")):
        raise DemoRefusal(
            f"--code {code.directory}: {code.generator.name} wrote no files under OUT/{TRAIN_CHANNEL}/"
        )
    return dataset


def start_arguments(code: DemoCode, code_prefix: str) -> list[str]:
    """The flags `trainstack start` packs and uploads the code with."""
    return ["--code", str(code.directory), "--entry", code.entry, "--code-prefix", code_prefix]
