"""`make demo-fault`'s path, smaller: the synthesized pipeline in the emulator, real local training on 2
CPU processes; rank 1 of attempt 1 hangs on purpose after the first checkpoint (train.py's
--inject-hang-at-step), train.py's watchdog ends the workers, torchrun restarts them inside the same job
(the profile's in_job_restarts reach it as PET_MAX_RESTARTS), and they resume from that checkpoint and
finish: one CreateTrainingJob, no fault retry. Without the registry's second, worse run (--no-worse-run: two
jobs fewer), whose rejection tests/demo/test_demo.py reads."""

from __future__ import annotations

import json
import re

from tests.demo.demo_process import run_demo


def test_a_hang_is_recovered_inside_the_same_job_with_no_second_create_training_job(default_app, tmp_path):
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
        "--no-worse-run",
    )
    assert "a rank of the first attempt will hang after its first checkpoint" in out
    first = re.search(
        r"attempt 1: (\S+) started from scratch, 1 in-job restart\(s\) after infrastructure:hang, "
        r"last logged step 20, ended Completed",
        out,
    )
    assert first, out
    assert "attempt 2:" not in out, out  # no second CreateTrainingJob
    # Each round is an MLflow run of the job: the killed one ended FAILED by the hang, the other FINISHED.
    rounds = re.findall(rf"mlflow:   {re.escape(first.group(1))}: (\w+),[^\n]*", out)
    assert rounds == ["FAILED", "FINISHED"], out
    assert re.search(
        rf"{re.escape(first.group(1))}: FAILED, .*; ended by trainstack-fault:infrastructure:hang", out
    )
    output = json.loads(re.search(r"^\{\n.*?^\}$", out, re.MULTILINE | re.DOTALL).group(0))
    assert output["attempts"] == 1
    assert output["retriedFaults"] == []
    assert "loads with AutoModelForCausalLM: LlamaForCausalLM" in out
    # The first run's evaluation and registration still run; no second run trains.
    assert re.search(r"registry: run \S+: version 1 Approved", out) and "-worse" not in out, out
    job = workdir / "jobs" / first.group(1) / "ml"
    log = (job / "output" / "job.log").read_text()
    assert "Rank 1 stops before step 15 for good" in log
    assert "Python stacks of every thread" in log, log[-3000:]
    # The restarted round resumed the first checkpoint; the hang's reason, which names its culprit, is kept.
    assert re.search(r"Resumed from \S+step_000000010 \(step 10\)", log), log[-3000:]
    kept = (job / "output" / "restarts" / "round-0.failure").read_text()
    assert re.search(
        r"^trainstack-fault:infrastructure:hang TimeoutError: Not waiting in a collective: "
        r"rank 1 on algo-1 at "
        r"watchdog.py:\d+ in hang_if_injected \(time.sleep\(3600\)\)\. Waiting in a collective: rank 0\. "
        r"No optimizer step completed after step 14 ",
        kept,
    ), kept
    assert not (job / "output" / "failure").exists()
