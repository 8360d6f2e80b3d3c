"""Slow hosts (training_scripts/rank_health.py): a rank slowed 6x is flagged within 3 log intervals, and a
profile that opts in ends the attempt after a checkpoint with the slow-host fault. One real CPU run
(torchrun, 2 processes, gloo); the clean runs' lack of a flag is asserted in test_train.py."""

from __future__ import annotations

import json
import re
import socket
from argparse import Namespace
from types import SimpleNamespace

import pytest
import rank_health
import torch
from flags import parse_args
from rank_health import RankHealth, SlowHostError, relative_to_peers
from sagemaker_training import mapping

from tests.training.harness import train
from training_scripts.metrics import SLOW_HOST_LINE, parse_metrics
from trainstack.job_request import encode_hyperparameters, launch_hyperparameters
from trainstack.profiles import Profile

LOG_INTERVAL = 2
# Well clear of the 2x line: a neighbour on the CPU stretches a rank's own CPU time too (a rank slowed 3x
# measured 1.81x in one interval on a loaded 2-core machine, which reset its streak).
INJECTED_SLOWDOWN = 6


def test_a_rank_slowed_6x_is_flagged_within_3_intervals_and_ends_the_attempt(dataset, tmp_path):
    output = tmp_path / "output"
    run = train(
        dataset, tmp_path, "--inject-slow-rank", "1", "--inject-slow-factor", str(INJECTED_SLOWDOWN),
        "--end-on-slow-host", "true", "--log-interval", str(LOG_INTERVAL),
        env={"SM_OUTPUT_DIR": str(output)},
    )  # fmt: skip
    assert run.returncode != 0, run.output
    root_cause = run.output[run.output.index("Root Cause (first observed failure)") :]
    assert re.search(r"exitcode\s*:\s*75\b", root_cause), run.output  # faults.EXIT_INFRASTRUCTURE
    host = socket.gethostname()
    (flag,) = [found.groups() for found in SLOW_HOST_LINE.finditer(run.output)]
    rank, flagged_host, ratio, intervals, step = flag
    assert (rank, flagged_host, intervals) == ("1", host, "3"), run.output
    assert float(ratio) >= 2
    assert int(step) <= 3 * LOG_INTERVAL, run.output  # within 3 intervals
    # Every interval's slowest rank was rank 1, at 2x the other's figure or more (the metric's values).
    ratios = parse_metrics(run.output)["train:slowest_rank_ratio"]
    assert len(ratios) == int(step) // LOG_INTERVAL and min(ratios) >= 2, ratios
    assert re.findall(r"slowest_rank=(\d+)", run.output) == ["1"] * len(ratios)
    reason = (output / "failure").read_text()
    assert reason.startswith(
        f"trainstack-fault:infrastructure:slow-host TimeoutError: Slow host: rank 1 on {host} spent at least "
        "2x the other ranks' median on each step in 3 log intervals in a row"
    ), reason
    # The attempt ended after a checkpoint of the step it was flagged at: the retry loses no step.
    assert (run.checkpoint_dir / f"step_{int(step):09d}" / "COMPLETE").exists(), run.output
    interval = int(step) // LOG_INTERVAL
    print(
        f"slow-host drill: rank 1 at {INJECTED_SLOWDOWN}x flagged at step {step}, interval {interval}; "
        f"ratios {ratios}"
    )


def test_each_rank_is_compared_with_the_median_of_the_others():
    # With 2 ranks a median over all would hold the slow rank itself: 3 / 2 = 1.5, under the factor.
    assert relative_to_peers([1.0, 3.0]) == [1 / 3, 3.0]
    assert relative_to_peers([1.0, 1.1, 0.9, 2.5]) == [1.0 / 1.1, 1.1, 0.9 / 1.1, 2.5]
    assert relative_to_peers([0.4]) == [1.0]  # a lone rank has no peers to be slow against


def test_a_profile_that_opts_in_reaches_train_py_as_its_flags(tmp_path):
    """Config -> job request -> the toolkit's command line (sagemaker-training's mapping.to_cmd_args, JSON
    values decoded as its environment does) -> train.py's parser."""
    profile = Profile(
        name="opted-in",
        strategy="torchrun",
        instance_preferences=[{"instance_type": "ml.g5.12xlarge"}],
        slow_host={"intervals": 2, "end_attempt": True},
    )
    encoded = encode_hyperparameters(launch_hyperparameters(profile))
    script_flags = {
        name: json.loads(value) for name, value in encoded.items() if not name.startswith("sagemaker_")
    }
    args = parse_args([*mapping.to_cmd_args(script_flags), "--train-dir", str(tmp_path)])
    assert (args.slow_host_intervals, args.end_on_slow_host) == (2, True)
    default = Profile(
        name="plain", strategy="torchrun", instance_preferences=[{"instance_type": "ml.g5.12xlarge"}]
    )
    assert "end_on_slow_host" not in launch_hyperparameters(default)  # train.py's defaults: flag, never end


def test_only_consecutive_slow_intervals_flag_and_the_opt_in_ends_after_the_checkpoint(monkeypatch):
    """The rule over intervals, the figures given as the all-reduce would return them."""
    intervals = iter([[1.0, 3.0], [1.0, 3.0], [1.0, 1.2], [1.0, 2.5], [1.0, 2.0], [1.0, 2.2]])
    monkeypatch.setattr(rank_health, "reduce_max", lambda runtime, own: torch.tensor(next(intervals)))
    args = Namespace(
        slow_host_intervals=3, end_on_slow_host=True, inject_slow_rank=None, inject_slow_factor=3
    )
    runtime = SimpleNamespace(rank=0, world_size=2, is_main=True)
    health = RankHealth(args, runtime, ["algo-1", "algo-2"])
    saved = []
    for step in (10, 20, 30, 40, 50):  # slow, slow, back to normal: the run starts over
        health.check(step, before_ending=lambda: saved.append(True))
    assert health.streaks == [0, 2] and saved == []
    with pytest.raises(
        SlowHostError, match=r"^Slow host: rank 1 on algo-2 spent at least 2x the other ranks'"
    ):
        health.check(60, before_ending=lambda: saved.append(True))
    assert saved == [True]  # the checkpoint came first
