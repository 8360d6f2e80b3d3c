"""`make test` deals the longest test files to each suite's workers first (tests/conftest.py's LONGEST_FILES),
so that no minutes-long demo is left for one worker to run alone at the end."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import LONGEST_FILES, REPO_ROOT


def test_every_listed_file_exists():
    # A renamed file would silently fall back to the end of the order.
    assert [path for path in LONGEST_FILES if not (REPO_ROOT / path).is_file()] == []


def test_the_longest_files_are_collected_first_and_make_test_keeps_that_order():
    # Two listed files (quick to import) after an unlisted folder, in the order pytest would collect them.
    listed = ["tests/demo/test_fault_demo.py", "tests/demo/test_queue_demo.py"]
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests/config",
         *listed],
        cwd=REPO_ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    files = list(dict.fromkeys(re.findall(r"^(tests/\S+\.py)::", collected, re.MULTILINE)))
    assert files[:2] == sorted(listed, key=LONGEST_FILES.index), files
    assert len(files) > 2 and all(path.startswith("tests/config/") for path in files[2:]), files
    # xdist's loadfile reorders files by their number of tests unless told not to.
    recipe = (REPO_ROOT / "Makefile").read_text()
    assert re.search(r"^XDIST := .*--dist loadfile --no-loadscope-reorder", recipe, re.MULTILINE)
    assert recipe.count("$(XDIST) -m") == 2  # both suites
