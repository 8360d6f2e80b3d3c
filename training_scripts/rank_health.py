"""Slow hosts: each rank's own share of every step, compared across the ranks at every log interval.

The figure is the CPU time the rank's training thread spends in the step (`time.thread_time`, the thread's
CLOCK_THREAD_CPUTIME_ID): its forward, backward and optimizer work, but not the time it waits for its
peers, because a thread blocked in a collective (gloo's waits, DDP's reducer, FSDP's all-gathers on the
host) sleeps and uses no CPU. So the slow rank stands out even under FSDP, whose collectives run inside
forward and backward and leave every rank's wall-clock step time the same; and a busy machine, which
delays a thread without charging it CPU time, raises no flag. What it cannot see is in docs/training.md
("Slow hosts"): work that is not the training thread's CPU time, GPU kernels above all.

At every log interval the ranks' figures meet in one all-reduce (distributed.reduce_max, one slot per
rank); every rank then holds the same figures and draws the same conclusion. A rank whose figure is at
least SLOW_FACTOR x the median of the other ranks' in --slow-host-intervals consecutive intervals is
flagged: rank 0 logs a line naming it and its host (metrics.SLOW_HOST_LINE, which `trainstack report` and
`status` read) and, with --end-on-slow-host, every rank ends the attempt (SlowHostError, faults.SLOW_HOST)
after a checkpoint, so that the retry resumes on new instances. Rank 0 logs the slowest rank's ratio at
every interval (metrics.format_rank_balance_line, the metric train:slowest_rank_ratio).
"""

import argparse
import contextlib
import logging
import statistics
import time
from collections.abc import Callable, Iterator

import torch
from distributed import Runtime, reduce_max
from faults import SLOW_HOST
from hang_culprit import hosts_of_ranks
from metrics import format_rank_balance_line, format_slow_host_line

SLOW_FACTOR = 2.0

log = logging.getLogger("train")


class SlowHostError(Exception):
    """A rank stayed slow for --slow-host-intervals log intervals and the profile ends the attempt on it."""

    fault = SLOW_HOST


def add_flags(add: Callable, positive: Callable, at_least_one: Callable, boolean: Callable) -> None:
    """train.py's slow-host flags (flags.build_parser passes its parser's add and value types)."""
    add(
        "--slow-host-intervals",
        type=positive,
        default=3,
        help=f"log intervals in a row a rank must spend {SLOW_FACTOR:g}x the others' median on its steps "
        "to be flagged as a slow host",
    )
    add(
        "--end-on-slow-host",
        type=boolean,
        default=False,
        help="end the attempt (trainstack-fault:infrastructure:slow-host) once a slow host is flagged, "
        "after a checkpoint, so that the retry gets new instances",
    )
    add("--inject-slow-rank", type=int, help="testing aid: this rank works --inject-slow-factor x as long")
    add("--inject-slow-factor", type=at_least_one, default=3.0, help="testing aid: see --inject-slow-rank")


class RankHealth:
    """Wrap each training step in `timed`; call `check` at every log interval, on every rank."""

    def __init__(self, args: argparse.Namespace, runtime: Runtime, hosts: list[str], clock=time.thread_time):
        self.runtime, self.hosts, self.clock = runtime, hosts, clock
        self.intervals, self.end_attempt = args.slow_host_intervals, args.end_on_slow_host
        self.slowdown = args.inject_slow_factor if args.inject_slow_rank == runtime.rank else 1.0
        self.busy, self.steps = 0.0, 0
        self.streaks = [0] * runtime.world_size

    @classmethod
    def start(cls, args: argparse.Namespace, runtime: Runtime) -> "RankHealth":
        return cls(args, runtime, hosts_of_ranks())

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        start = self.clock()
        yield
        if self.slowdown > 1:  # the testing aid: burn CPU as a host this much slower would
            until = self.clock() + (self.slowdown - 1) * (self.clock() - start)
            while self.clock() < until:
                pass
        self.busy += self.clock() - start
        self.steps += 1

    def check(self, step: int, before_ending: Callable[[], None]) -> None:
        """Compare this interval's figures across the ranks; where a rank is newly flagged and the profile
        ends the attempt on it, call `before_ending` (a checkpoint) and raise SlowHostError."""
        own = torch.zeros(self.runtime.world_size, dtype=torch.float64)
        own[self.runtime.rank] = self.busy / max(self.steps, 1)
        figures = reduce_max(self.runtime, own).tolist()
        self.busy, self.steps = 0.0, 0
        ratios = relative_to_peers(figures)
        slowest = max(range(len(ratios)), key=ratios.__getitem__)
        if self.runtime.is_main and len(ratios) > 1:
            log.info(format_rank_balance_line(step, slowest, self.hosts[slowest], ratios[slowest]))
        self.streaks = [
            streak + 1 if ratio >= SLOW_FACTOR else 0
            for streak, ratio in zip(self.streaks, ratios, strict=True)
        ]
        newly = [rank for rank, streak in enumerate(self.streaks) if streak == self.intervals]
        for rank in newly if self.runtime.is_main else ():
            log.warning(
                format_slow_host_line(rank, self.hosts[rank], ratios[rank], self.intervals, step, SLOW_FACTOR)
            )
        if self.end_attempt and newly:
            before_ending()
            raise self._error(newly)

    def _error(self, ranks: list[int]) -> SlowHostError:
        named = ", ".join(f"rank {rank} on {self.hosts[rank]}" for rank in ranks)
        return SlowHostError(
            f"Slow host: {named} spent at least {SLOW_FACTOR:g}x the other ranks' median on each step in "
            f"{self.intervals} log intervals in a row, so the attempt ends after a checkpoint "
            "(--end-on-slow-host) and the retry resumes it on new instances."
        )


def relative_to_peers(figures: list[float]) -> list[float]:
    """Each rank's figure over the median of the other ranks' (with 2 ranks the other's: a median over all
    would include the slow rank itself). 1.0 for a lone rank or peers that measured nothing."""
    ratios = []
    for rank, figure in enumerate(figures):
        peers = figures[:rank] + figures[rank + 1 :]
        median = statistics.median(peers) if peers else 0.0
        ratios.append(figure / median if median > 0 else 1.0)
    return ratios
