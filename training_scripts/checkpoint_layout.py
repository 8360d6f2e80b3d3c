"""Where a checkpoint lies under the checkpoint dir, and when it is complete: read by checkpoint.py (which
writes them) and by `trainstack checkpoints restore` (which finds them among the checkpoint bucket's
versions). No torch: the CLI imports it."""

import re

# Written last into a step's folder; a folder without it is ignored.
MARKER = "COMPLETE"
FOLDER_PATTERN = re.compile(r"^step_(\d+)$")  # step_000000100; step_000000100.tmp is a save in progress


def folder_name(step: int) -> str:
    return f"step_{step:09d}"
