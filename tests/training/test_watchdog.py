"""The hang watchdog: a rank that stops stepping ends the run within the bound, with every rank's stacks in
the log, the hang's token in SageMaker's failure file and exit code 75; a checkpoint save slower than
the step bound does not trip it. Real CPU runs (torchrun, 2 processes, gloo), and the bound's rules on a
virtual clock."""

from __future__ import annotations

import re
import socket
import threading
import time
from argparse import Namespace
from datetime import datetime

import pytest
import train as train_script
from data import UserError
from flags import parse_args
from watchdog import CAP, WARMUP_STEPS, Bounds, Watchdog

from tests.training.harness import TRAIN_FLAGS, train, write_learnable_shards

BOUND = (
    10  # seconds without a step, after the first ones: 20-100x a tiny model's CPU step on a loaded machine
)
WATCHDOG_FLAGS = [
    "--watchdog-min-seconds", str(BOUND), "--watchdog-step-multiple", "1",
    "--watchdog-startup-seconds", "60", "--watchdog-save-seconds", "60",
]  # fmt: skip


def test_a_hung_rank_ends_the_run_within_the_bound_and_is_named(dataset, tmp_path):
    output = tmp_path / "output"
    run = train(
        dataset, tmp_path, *WATCHDOG_FLAGS, "--inject-hang-at-step", "6", "--inject-hang-rank", "1",
        # Above every bound, yet short: had the watchdog not tripped first, gloo's timeout would show.
        "--collective-timeout-seconds", "90", "--log-interval", "1",
        env={"SM_OUTPUT_DIR": str(output)},
    )  # fmt: skip
    ended = time.time()
    assert run.returncode != 0, run.output
    # torchrun's report: the first rank to exit did so with the watchdog's code.
    root_cause = run.output[run.output.index("Root Cause (first observed failure)") :]
    assert re.search(r"exitcode\s*:\s*75\b", root_cause), run.output
    reason = (output / "failure").read_text()
    # Whichever rank wrote it, the reason names the rank that stopped (the one not waiting in a collective),
    # where it stopped and its host, and the rank that only waited for it.
    host = socket.gethostname()
    assert re.match(
        r"trainstack-fault:infrastructure:hang TimeoutError: Not waiting in a collective: rank 1 on "
        rf"{re.escape(host)} at watchdog.py:\d+ in hang_if_injected \(time.sleep\(3600\)\)\. "
        r"Waiting in a collective: rank 0\. No optimizer step completed after step 5 in \d+ s",
        reason,
    ), reason
    # Every rank's stacks are in the log.
    assert re.search(
        rf"Rank 0 on {re.escape(host)}, waiting in a collective, at train.py:\d+ in token_losses .*, inside "
        r"torch/nn/parallel/distributed.py:\d+ in _distributed_broadcast_coalesced .*\. Python stacks of "
        r"every thread at the watchdog's trip",
        run.output,
    ), run.output
    assert f"Rank 1 on {host}, not waiting in a collective, at watchdog.py:" in run.output, run.output
    assert "Timed out waiting" not in run.output  # gloo's collective timeout
    waited = [
        int(s)
        for s in re.findall(
            r"No optimizer step completed after step 5 in (\d+) s \(bound (?:\d+)", run.output
        )
    ]
    assert waited and all(s >= BOUND for s in waited)  # never before the bound
    injected, tripped = (
        logged_at(run.output, "stops before step 6 for good"),
        logged_at(run.output, "at the watchdog's trip"),
    )
    print(
        f"detection: hang injected -> first trip {tripped - injected:.1f} s (bound {BOUND} s) -> torchrun "
        f"exited {ended - tripped:.1f} s later: {ended - injected:.1f} s in all"
    )


def logged_at(output: str, text: str) -> float:
    """The time of the first log line holding `text`."""
    line = next(line for line in output.splitlines() if text in line)
    stamp = re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}", line).group()
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


@pytest.mark.parametrize("async_checkpoint", ["false", "true"])
def test_a_checkpoint_save_slower_than_the_step_bound_does_not_trip_it(dataset, tmp_path, async_checkpoint):
    flags = [
        *TRAIN_FLAGS,
        "--max-steps",
        "12",
        "--checkpoint-interval",
        "10",
        "--async-checkpoint",
        async_checkpoint,
    ]
    output = tmp_path / "output"
    # The save sleeps 3 s past the step bound (the watchdog trips on the bound itself, not on a poll): without
    # the save's own bound (60 s) this run would trip.
    run = train(
        dataset, tmp_path, *WATCHDOG_FLAGS, "--inject-save-delay-seconds", str(BOUND + 3),
        flags=flags, env={"SM_OUTPUT_DIR": str(output)},
    )  # fmt: skip
    assert run.returncode == 0, run.output
    assert "Saved checkpoint" in run.output and "trainstack-fault" not in run.output
    assert not (output / "failure").exists()


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


BOUNDS = Bounds(
    step_multiple=10, min_seconds=30, startup_seconds=600, save_seconds=900, collective_timeout=3600
)


def stepped(watchdog: Watchdog, clock: Clock, seconds: list[float]) -> None:
    for step, duration in enumerate(seconds, start=watchdog.step + 1):
        clock.now += duration
        watchdog.step_completed(step)


def test_the_startup_bound_holds_until_the_first_steps_are_timed():
    clock = Clock()
    watchdog = Watchdog(BOUNDS, 0, clock)
    clock.now += 599
    assert watchdog.overdue() is None
    stepped(watchdog, clock, [300] * (WARMUP_STEPS - 1))
    clock.now += 599
    assert watchdog.overdue() is None
    clock.now += 1
    assert watchdog.overdue()[1:] == (600, f"the startup bound, until {WARMUP_STEPS} steps have completed")
    assert list(watchdog.step_times) == [300]  # the first step's time, since the start, is not a step time
    assert BOUNDS.of([300, 300], None) == (3000, "10 x the median step, 300 s")  # once a third step completes


def test_then_the_bound_is_a_multiple_of_the_median_step_with_a_minimum():
    clock = Clock()
    watchdog = Watchdog(BOUNDS, 0, clock)
    stepped(watchdog, clock, [500, 1, 1, 1, 40])  # one slow outlier does not move the median
    clock.now += 30
    assert watchdog.overdue() == (30, 30, "the minimum")
    stepped(watchdog, clock, [5] * 10)
    clock.now += 49
    assert watchdog.overdue() is None
    clock.now += 1
    assert watchdog.overdue() == (50, 50, "10 x the median step, 5 s")


def test_a_save_gets_its_own_bound_and_the_next_step_its_usual_one_from_its_end():
    clock = Clock()
    watchdog = Watchdog(BOUNDS, 0, clock)
    stepped(watchdog, clock, [1] * 10)
    clock.now += 20  # the step loop's remainder before the save
    with watchdog.extended("checkpoint save"):
        clock.now += 899
        assert watchdog.overdue() is None
        clock.now += 1
        assert watchdog.overdue() == (900, 900, "the bound of a checkpoint save")
    clock.now += 29
    assert watchdog.overdue() is None
    clock.now += 1
    assert watchdog.overdue()[1] == 30


def test_the_bound_stays_below_the_collective_timeout():
    clock = Clock()
    watchdog = Watchdog(BOUNDS, 0, clock)
    stepped(watchdog, clock, [1000] * 10)  # 10 x 1000 s: more than the 3600 s timeout
    clock.now += CAP * 3600
    assert watchdog.overdue()[1:] == (CAP * 3600, f"{CAP:g} x the collective timeout")


def test_a_collective_timeout_within_a_watchdog_bound_is_refused(tmp_path):
    with pytest.raises(UserError, match=r"^Argument --collective-timeout-seconds: must be above every fixed"):
        parse_args(["--train-dir", str(tmp_path), "--watchdog-save-seconds", "4000"])


def test_the_defaults_keep_the_collective_timeout_above_every_bound(tmp_path):
    args = parse_args(["--train-dir", str(tmp_path)])
    bounds = Bounds.from_args(args)
    assert bounds == Bounds(10, 300, 1800, 1800, 3600)
    assert isinstance(args, Namespace) and args.watchdog and args.inject_hang_at_step is None


def test_a_run_that_fails_leaves_no_watchdog_behind(tmp_path, monkeypatch):
    """In-process (a world of one): once main returns, its watchdog is gone, whatever the ending; one left
    watching would end the calling process when its bound ran out."""
    write_learnable_shards(tmp_path / "train", 8_000, seed=1)
    monkeypatch.setenv("SM_OUTPUT_DIR", str(tmp_path / "output"))
    code = train_script.main(
        [
            "--model-preset", "tiny", "--parallelism", "ddp", "--seq-len", "32", "--micro-batch-size", "2",
            "--learning-rate", "1e30", "--warmup-steps", "0", "--max-nonfinite-steps", "1",
            "--train-dir", str(tmp_path / "train"), "--model-dir", str(tmp_path / "model"),
            "--checkpoint-dir", str(tmp_path / "checkpoints"),
        ]
    )  # fmt: skip
    assert code == 2
    assert (tmp_path / "output" / "failure").read_text().startswith("trainstack-fault:user:nonfinite ")
    assert "watchdog" not in [thread.name for thread in threading.enumerate()]
