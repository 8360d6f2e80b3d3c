"""`make demo-queue`'s path: two teams' pipelines synthesized in queue mode, their retrainings through the
emulated AWS Batch queue of 2 instances, real local training; teama's fourth run is refused at its budget
of 3 live runs before it reaches the queue while teamb's run is submitted, and fair share starts teamb's
waiting run before teama's third, which was submitted earlier."""

from __future__ import annotations

from tests.demo.demo_process import run_demo
from tests.queue.conftest import service_job


def test_a_team_at_its_run_budget_is_refused_while_the_other_teams_run_starts_in_fair_share_order(tmp_path):
    out = run_demo("localaws.demo.queue_run", "--workdir", str(tmp_path / "demo"), "--max-steps", "10")
    assert "teama started trainstack-teama-a4: FAILED InvalidInput" in out
    assert (
        "Run trainstack-teama-a4 is over the budget of team teama: max_concurrent_runs 3 (3 runs live). "
        "It frees as the team's live runs end (the soonest by "
    ) in out
    assert "teamb started trainstack-teamb-b1\n" in out
    # teama's first two runs take both instances; its third and teamb's wait.
    for waiting in ("trainstack-teama-a3-1", "trainstack-teamb-b1-1"):
        assert f"{waiting}: RUNNABLE" in out
    assert (
        "Batch started the jobs in this order: "
        "trainstack-teama-a1-1 -> trainstack-teama-a2-1 -> trainstack-teamb-b1-1 -> trainstack-teama-a3-1"
    ) in out
    for run in ("teama-a1", "teama-a2", "teama-a3", "teamb-b1"):
        # Batch's name for the training job: AWSBatch + the service job's short name (docs/queue.md).
        job = "AWSBatch" + service_job(f"trainstack-{run}-1")
        assert f"trainstack-{run}: SUCCEEDED, training job {job}" in out
    assert "trainstack-teama-a4: FAILED, training job -" in out
