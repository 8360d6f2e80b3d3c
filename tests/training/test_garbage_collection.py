"""train.py collects garbage at the steps it chooses, the same on every rank, with automatic collection
off from before its first import; a program that calls train.main() keeps its own collector."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref

import garbage_collection
import pytest

from tests.training.harness import SCRIPTS, TRAIN_PY

# As `python train.py --help` starts it (the script's folder first on sys.path), then the collector's state.
RUN_AS_SCRIPT = f"""
import gc, runpy, sys
sys.argv, sys.path[0] = ["train.py", "--help"], {str(SCRIPTS)!r}
try:
    runpy.run_path({str(TRAIN_PY)!r}, run_name="__main__")
except SystemExit:
    pass
print(gc.isenabled(), gc.get_freeze_count())
"""


def test_as_a_script_automatic_collection_is_off_and_what_the_imports_made_is_frozen():
    result = subprocess.run(
        [sys.executable, "-c", RUN_AS_SCRIPT], capture_output=True, text=True, check=True, timeout=300
    )
    enabled, frozen = result.stdout.split()[-2:]
    assert enabled == "False"
    assert int(frozen) > 100_000  # torch, DCP and transformers' objects, frozen after the imports


def test_imported_by_another_program_the_collector_is_left_as_it_was():
    import train  # noqa: F401  (imported, not run: its __main__ block does not run)

    assert gc.isenabled()
    assert not garbage_collection.collect_after(0)
    assert not garbage_collection.collect_after(garbage_collection.EVERY_STEPS)


class Node:
    """An object in a reference cycle: only the cycle collector frees it."""

    def __init__(self):
        self.itself = self


@pytest.fixture
def automatic_collection_off():
    gc.disable()
    yield
    gc.enable()


def test_a_cycle_lives_until_the_next_scheduled_step_then_is_collected(automatic_collection_off):
    every = garbage_collection.EVERY_STEPS
    cycle = Node()
    alive = weakref.ref(cycle)
    del cycle
    for step in range(1, every):
        assert not garbage_collection.collect_after(step)
    assert alive() is not None  # no automatic collection in between
    assert garbage_collection.collect_after(every)
    assert alive() is None
    assert garbage_collection.collect_after(0) and garbage_collection.collect_after(3 * every)
