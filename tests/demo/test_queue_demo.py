"""`make demo-queue`'s path: the pipeline synthesized in queue mode, two teams' retrainings through the
emulated AWS Batch queue of 2 instances, real local training; fair share starts teamB's waiting run before
teamA's third, which was submitted earlier."""

from __future__ import annotations

from tests.demo.demo_process import run_demo
from tests.queue.conftest import service_job


def test_two_teams_share_the_queue_and_fair_share_orders_the_waiting_runs(tmp_path):
    out = run_demo("localaws.demo.queue_run", "--workdir", str(tmp_path / "demo"), "--max-steps", "10")
    # teamA's first two runs take both instances; its third and teamB's wait.
    for waiting in ("trainstack-a3-1", "trainstack-b1-1"):
        assert f"{waiting}: RUNNABLE" in out
    assert (
        "Batch started the jobs in this order: "
        "trainstack-a1-1 -> trainstack-a2-1 -> trainstack-b1-1 -> trainstack-a3-1"
    ) in out
    for run in ("a1", "a2", "a3", "b1"):
        # Batch's name for the training job: AWSBatch + the service job's short name (docs/queue.md).
        job = "AWSBatch" + service_job(f"trainstack-{run}-1")
        assert f"trainstack-{run}: SUCCEEDED, training job {job}" in out
