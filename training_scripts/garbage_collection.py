"""Garbage collection on the training loop's schedule, not the allocator's.

train.py, run as a script, turns automatic collection off before its imports (`automatic_off`): a
collection pauses one rank at a step of its own while every other rank waits for it in the next
collective, so training processes collect at the same steps on every rank, as torchtitan
(`GarbageCollection`, training.gc_freq) and Megatron-LM (`--manual-gc`) do. It is also cheaper: the
automatic collector kept rescanning the half million objects that importing torch, DCP and transformers
makes, about 12 % of that import's CPU (benchmarks/collector_cost.py: median 0.88 over 5 pairs, torch
2.5.1, transformers 4.44.2). Where automatic collection is on (train.main() called in another program),
these calls leave it alone."""

import gc

# Steps between two collections: torchtitan's default gc_freq.
EVERY_STEPS = 50


def automatic_off() -> None:
    gc.disable()


def imports_done() -> None:
    """What the imports made lives as long as the process: no later collection scans it again."""
    if not gc.isenabled():
        gc.freeze()


def collect_after(step: int) -> bool:
    """Collect every cycle of garbage after each EVERY_STEPS-th step (and before the first, step 0); True
    when it collected."""
    if gc.isenabled() or step % EVERY_STEPS:
        return False
    gc.collect()
    return True
