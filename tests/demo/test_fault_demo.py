"""`make demo-fault`'s path, smaller: the synthesized pipeline in the emulator, real local training on 2
CPU processes; rank 1 of attempt 1 hangs on purpose after the first checkpoint (train.py's
--inject-hang-at-step), train.py's watchdog ends the job, the pipeline classifies the FailureReason as an
infrastructure fault and retries, and attempt 2 resumes from that checkpoint."""

from __future__ import annotations

import json
import re

from tests.demo.demo_process import run_demo


def test_a_hang_is_ended_by_the_watchdog_and_the_next_attempt_resumes_from_the_checkpoint(
    default_app, tmp_path
):
    _, _, assembly = default_app
    workdir = tmp_path / "demo"
    out = run_demo(
        "localaws.demo",
        "--fault",
        "hang",
        "--cdk-out",
        assembly.directory,
        "--workdir",
        str(workdir),
        "--max-steps",
        "20",
        "--checkpoint-interval",
        "10",
    )
    assert "a rank of the first attempt will hang after its first checkpoint" in out
    first = re.search(
        r"attempt 1: (\S+) started from scratch, .*ended Failed: AlgorithmError: "
        # The reason names rank 1, the rank that stopped (rank 0 only waited for it), and its host.
        r"trainstack-fault:infrastructure:hang TimeoutError: Not waiting in a collective: rank 1 on algo-1 .*"
        r"\[infrastructure fault \(hang\)\]",
        out,
    )
    assert first, out
    resumed = re.search(
        r"attempt 2: \S+ resumed from the checkpoint of step (\d+), last logged step 20, ended Completed", out
    )
    assert resumed and int(resumed.group(1)) >= 10, out
    # The execution's output names the retry, its class and kind.
    output = json.loads(re.search(r"^\{\n.*?^\}$", out, re.MULTILINE | re.DOTALL).group(0))
    (retry,) = output["retriedFaults"]
    assert (retry["attempt"], retry["job"], retry["class"], retry["kind"]) == (
        1,
        first.group(1),
        "infrastructure",
        "hang",
    )
    assert re.search(
        r"TimeoutError: Not waiting in a collective: rank 1 on algo-1 at watchdog.py:\d+ in hang_if_injected "
        r"\(time.sleep\(3600\)\)\. Waiting in a collective: rank 0\. "
        r"No optimizer step completed after step 14 ",
        retry["reason"],
    ), retry["reason"]
    assert output["attempts"] == 2
    assert "loads with AutoModelForCausalLM: LlamaForCausalLM" in out
    # Rank 1 stopped; the watchdog dumped the stacks into the job's log.
    log = (workdir / "jobs" / first.group(1) / "ml" / "output" / "job.log").read_text()
    assert "Rank 1 stops before step 15 for good" in log
    assert "Python stacks of every thread" in log, log[-3000:]
