"""`make demo-trigger`'s path: the app synthesized with retrain_on_new_data on, uploads to the emulated
dataset bucket through EventBridge, the debounce, the FSx import, scripted training and evaluation jobs:
one run per burst, exactly one more for data that landed during it, none for the same data again."""

from __future__ import annotations

import re

from tests.demo.demo_process import run_demo


def test_a_burst_starts_one_run_data_during_it_one_more_and_the_same_data_none(tmp_path):
    out = run_demo("localaws.demo.trigger_run", "--workdir", str(tmp_path / "demo"))
    runs = re.findall(r"run (trainstack-data-\S+): (\w+),", out)
    assert [status for _, status in runs] == ["SUCCEEDED", "SUCCEEDED"], out
    assert "trigger: unchanged: No training started: the dataset under datasets/demo/ has the hash" in out
    assert out.rstrip().endswith(
        "every check held: one run per burst, one more for data that landed during it, none for the same data"
    )
