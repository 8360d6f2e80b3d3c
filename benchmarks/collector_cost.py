"""What CPython's automatic garbage collector costs where trainstack turns it off or down.

    .venv-image/bin/python benchmarks/collector_cost.py [--pairs 5] [--skip-suite]

Both figures are CPU seconds of runs made side by side, alternating, in this one invocation (these
machines are noisy), with the median ratio over the pairs and its spread:

1. `import train` in a fresh interpreter, automatic collection on (CPython's default) against off, as
   train.py runs it as a script (training_scripts/garbage_collection.py);
2. one emulator test file (tests/pipeline/test_scenarios.py, in one pytest process) at CPython's default
   thresholds (700, 10, 10) against the suite's (tests/conftest.py): the pytest process and its children.
"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "training_scripts"
SUITE_FILE = "tests/pipeline/test_scenarios.py"

IMPORT = "import train"
IMPORT_WITHOUT_COLLECTOR = "import gc; gc.disable(); import train"

# Runs one test file in this process; the plugin puts CPython's default thresholds back after
# tests/conftest.py set the suite's own.
PYTEST_AT_DEFAULT_THRESHOLDS = f"""
import gc, sys, pytest
class DefaultThresholds:
    def pytest_sessionstart(self, session):
        gc.set_threshold(*{gc.get_threshold()!r})
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", {SUITE_FILE!r}], plugins=[DefaultThresholds()]))
"""
PYTEST_AT_SUITE_THRESHOLDS = f"""
import sys, pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", {SUITE_FILE!r}]))
"""


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cpu_of(code: str, cwd: Path) -> float:
    """CPU seconds of `python -c code` and everything it started."""
    before = children_cpu()
    result = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"collector_cost: `python -c {code!r}` failed:\n{result.stdout}{result.stderr}")
    return children_cpu() - before


def compare(name: str, with_collector: str, without: str, cwd: Path, pairs: int) -> None:
    ratios = []
    for pair in range(pairs):
        on, off = cpu_of(with_collector, cwd), cpu_of(without, cwd)
        ratios.append(off / on)
        print(f"  pair {pair + 1}: {on:.2f} -> {off:.2f} CPU-s")
    print(
        f"{name}: {statistics.median(ratios):.2f} of the CPU with CPython's automatic collection "
        f"(spread {min(ratios):.2f}-{max(ratios):.2f}, {pairs} pairs)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--skip-suite", action="store_true", help="only the import (figure 1)")
    args = parser.parse_args(argv)
    compare("import train, collector off", IMPORT, IMPORT_WITHOUT_COLLECTOR, SCRIPTS, args.pairs)
    if not args.skip_suite:
        compare(
            f"{SUITE_FILE} at the suite's thresholds",
            PYTEST_AT_DEFAULT_THRESHOLDS,
            PYTEST_AT_SUITE_THRESHOLDS,
            ROOT,
            min(args.pairs, 2),
        )


if __name__ == "__main__":
    main()
