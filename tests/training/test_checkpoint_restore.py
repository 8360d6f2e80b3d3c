"""benchmarks/checkpoint_restore.py, one small case: a rank's direct read moves about 1 / ranks of what
SageMaker's sync downloads to every node, and every way restores the saved shards exactly."""

from __future__ import annotations

import sys

from tests.training.harness import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import checkpoint_restore  # noqa: E402


def test_direct_and_shared_reads_move_one_share_of_the_full_download_per_node(capsys):
    ranks = 2
    figures = checkpoint_restore.main(["--ranks", str(ranks), "--size-mb", "4"])
    full = figures["full download"]["bytes"]
    assert full >= 3 * checkpoint_restore.MB  # whole 1 MiB matrices: 3 of them for 4 MB
    for way in ("direct read", "shared dir"):
        # Each rank reads its own shards and the small .metadata: just above 1 / ranks, far below 1.
        assert 1 / ranks <= figures[way]["ratio"] < 1 / ranks + 0.05, figures
    assert "bytes / full download" in capsys.readouterr().out
