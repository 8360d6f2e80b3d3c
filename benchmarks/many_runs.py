"""Forty runs (or more) of two teams started at once in the local emulator, in direct and queue mode, each
meeting its own fault (tests/teams/many_runs.py): prints, per mode, the real seconds they took, the runs
that did not end as scripted and what they left behind (both must be empty; the exit status says so).
`make test` runs one run of each scenario per mode (tests/teams/test_many_runs.py).

    PYTHONPATH=. .venv/bin/python benchmarks/many_runs.py [--runs 40] [--modes direct queue]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.teams.many_runs import leftovers, many_runs_world, run_all, runs_of, synthesized, unexpected_ends


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--modes", nargs="+", choices=["direct", "queue"], default=["direct", "queue"])
    options = parser.parse_args()
    failed = False
    for mode in options.modes:
        settings, stacks, assembly = synthesized(mode, Path(tempfile.mkdtemp(prefix=f"teams-{mode}.")))
        runs = runs_of(options.runs)
        with (
            pytest.MonkeyPatch.context() as patches,
            many_runs_world(mode, settings, stacks, assembly, runs, patches) as world,
        ):
            started, clock_started = time.perf_counter(), world.clock.time()
            ends = run_all(world, runs)
            seconds = time.perf_counter() - started
            wrong, left = unexpected_ends(ends), leftovers(world, ends)
        failed = failed or bool(wrong or left)
        print(
            json.dumps(
                {
                    "mode": mode,
                    "runs": options.runs,
                    "executions": len(runs),
                    "seconds": round(seconds, 1),
                    "clock_hours": round((world.clock.time() - clock_started) / 3600, 1),
                    "not_as_scripted": wrong,
                    "left_behind": left,
                }
            ),
            flush=True,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
