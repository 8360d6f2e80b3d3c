"""In-job restarts: torchrun restarts the workers of a hung round inside the same process tree
(PET_MAX_RESTARTS, as the job request sets it), the new round resumes from the newest checkpoint and
reaches the weights of an uninterrupted run; a budget of restarts that runs out ends as today (the hang's
reason, a failed exit); a fault that does not leave the instances healthy is never restarted. Real CPU
runs (torchrun, 2 processes, gloo), and the decision on each reason."""

from __future__ import annotations

import logging
import re
from types import SimpleNamespace

import in_job_restart
import mlflow  # in the image (container/requirements.txt), so in .venv-image: never skipped
import pytest
from in_job_restart import (
    DECLINED,
    RECORD_DIR,
    ROUND_ENV,
    begin_round,
    decline,
    device_problem,
    reason_to_refuse,
)
from mlflow_log import FAILURE_TAG
from trainstack_runtime import job

from tests.training.harness import load_weights, max_weight_difference, train
from tests.training.test_watchdog import WATCHDOG_FLAGS

HANG = [
    *WATCHDOG_FLAGS, "--inject-hang-at-step", "15", "--inject-hang-rank", "1",
    "--collective-timeout-seconds", "90",
]  # fmt: skip


def mlflow_env(store) -> dict:
    return {
        "MLFLOW_TRACKING_URI": store.as_uri(),
        "MLFLOW_ALLOW_FILE_STORE": "true",  # MLflow 3 serves a local file store only with it
        "MLFLOW_EXPERIMENT_NAME": "restarts",
        "TRAINING_JOB_NAME": "trainstack-restart-1",
    }


def mlflow_runs(store, monkeypatch) -> list:
    """The job's MLflow runs, oldest first."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = mlflow.tracking.MlflowClient(store.as_uri())
    return client.search_runs(
        [client.get_experiment_by_name("restarts").experiment_id], order_by=["start_time"]
    )


def test_a_hang_is_recovered_inside_the_same_job_and_reaches_the_uninterrupted_weights(
    dataset, tmp_path, reference_run, monkeypatch
):
    output, store = tmp_path / "output", tmp_path / "mlruns"
    run = train(
        dataset,
        tmp_path,
        *HANG,
        env={"PET_MAX_RESTARTS": "1", "SM_OUTPUT_DIR": str(output), **mlflow_env(store)},
    )
    assert run.returncode == 0, run.output
    assert "Rank 1 stops before step 15 for good" in run.output
    # torchrun's own agent saw the watchdog's exit and restarted the workers: one process tree, one job.
    assert re.search(r"failed \(exitcode: 75\) local_rank: \d", run.output), run.output
    assert re.search(
        r"In-job restart 1: the workers were restarted inside the same job after "
        r"trainstack-fault:infrastructure:hang TimeoutError: Not waiting in a collective: rank 1",
        run.output,
    ), run.output
    assert "(step 10)" in run.output  # round 1 resumed the checkpoint of step 10
    # The hang's line is kept aside; the job, which succeeded, reports no failure.
    assert not (output / "failure").exists()
    kept = (output / RECORD_DIR / "round-0.failure").read_text()
    assert kept.startswith("trainstack-fault:infrastructure:hang TimeoutError:"), kept
    difference = max_weight_difference(load_weights(run.model_dir), load_weights(reference_run.model_dir))
    assert difference <= 1e-6
    # Each round is an MLflow run of the job; the killed one ended FAILED with the hang's line.
    runs = mlflow_runs(store, monkeypatch)
    assert [(r.info.run_name, r.info.status) for r in runs] == [
        ("trainstack-restart-1", "FAILED"),
        ("trainstack-restart-1", "FINISHED"),
    ]
    assert runs[0].data.tags[FAILURE_TAG] == kept.strip()
    assert FAILURE_TAG not in runs[1].data.tags


def test_when_the_restart_budget_runs_out_the_job_fails_with_the_hang_as_before(
    dataset, tmp_path, monkeypatch
):
    output, store = tmp_path / "output", tmp_path / "mlruns"
    run = train(
        dataset, tmp_path, *HANG, "--inject-hang-rounds", "2",
        env={"PET_MAX_RESTARTS": "1", "SM_OUTPUT_DIR": str(output), **mlflow_env(store)},
    )  # fmt: skip
    assert run.returncode != 0, run.output
    assert run.output.count("In-job restart") == 1, run.output
    assert run.output.count("stops before step 15 for good") == 2, run.output
    # The last round's own hang is the job's failure reason, for the pipeline's retry.
    reason = (output / "failure").read_text()
    assert reason.startswith("trainstack-fault:infrastructure:hang TimeoutError:"), reason
    assert not (tmp_path / "model" / "model.safetensors").exists()
    # Both rounds' MLflow runs end FAILED with the line that ended them: the first as the killed round
    # (ended by the next one), the last by itself, since no round follows it.
    runs = mlflow_runs(store, monkeypatch)
    assert [r.info.status for r in runs] == ["FAILED", "FAILED"]
    assert runs[0].data.tags[FAILURE_TAG] == (output / RECORD_DIR / "round-0.failure").read_text().strip()
    assert runs[1].data.tags[FAILURE_TAG] == reason.strip()


@pytest.mark.parametrize(
    ("reason", "restartable"),
    [
        ("trainstack-fault:infrastructure:hang TimeoutError: Not waiting in a collective: rank 1", True),
        ("trainstack-fault:infrastructure:collective-timeout RuntimeError: Watchdog caught ...", True),
        ("trainstack-fault:infrastructure:nccl RuntimeError: NCCL error ... remote process exited", True),
        ("trainstack-fault:infrastructure:network RuntimeError: Connection reset by peer", True),
        (None, True),  # a worker that crashed without a reason
        ("trainstack-fault:infrastructure:hardware RuntimeError: uncorrectable ECC error encountered", False),
        ("trainstack-fault:infrastructure:slow-host TimeoutError: Slow host: rank 3", False),
        ("trainstack-fault:infrastructure:plan-ending TimeoutError: the training plan ends", False),
        ("trainstack-fault:user:oom MemoryError: CUDA out of memory", False),
        ("trainstack-fault:user:config ValueError: Argument --max-steps", False),
        ("TRAINSTACK PREFLIGHT FAILED: NCCL 2.21.5 != 2.23.4", False),  # no token, no row: unknown
    ],
)
def test_only_faults_that_leave_the_instances_healthy_are_restarted(reason, restartable):
    assert (reason_to_refuse(reason) is None) is restartable


HARDWARE = "trainstack-fault:infrastructure:hardware RuntimeError: uncorrectable ECC error encountered"


@pytest.fixture
def after_a_hardware_fault(tmp_path, monkeypatch):
    """A job's output folder whose first round failed with HARDWARE; this process is its round 1."""
    output = tmp_path / "output"
    output.mkdir()
    (output / "failure").write_text(HARDWARE + "\n")
    monkeypatch.setenv("SM_OUTPUT_DIR", str(output))
    monkeypatch.setenv(ROUND_ENV, "1")
    return output


def test_a_refused_restart_ends_every_later_round_at_once_as_the_same_fault(
    after_a_hardware_fault, monkeypatch
):
    output = after_a_hardware_fault
    first = begin_round()
    assert (first.previous_reason, first.declined) == (HARDWARE, None)
    assert not (output / "failure").exists()  # set aside: this round reports its own
    assert decline(reason_to_refuse(first.previous_reason), echo=False) == 75
    assert (output / "failure").read_text().strip() == HARDWARE
    monkeypatch.setenv(ROUND_ENV, "2")
    second = begin_round()
    assert second.declined == HARDWARE
    assert (output / RECORD_DIR / DECLINED).exists()
    assert decline(second.declined, echo=False) == 75
    assert (output / "failure").read_text().strip() == HARDWARE


@pytest.fixture
def root_logging():
    """The root logger as it was: job.run configures logging for the whole process, as a rank does."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_a_later_round_that_declines_prints_its_line_on_every_rank(
    after_a_hardware_fault, monkeypatch, capsys, root_logging
):
    """A round after a refusal exits before any collective, and torchrun ends the other ranks as soon as one
    exits: a line printed by rank 0 alone was lost whenever another rank exited first."""
    decline(reason_to_refuse(begin_round().previous_reason), echo=False)  # round 1 refuses
    monkeypatch.setenv(ROUND_ENV, "2")
    monkeypatch.setenv("RANK", "1")
    assert job.run(lambda _: pytest.fail("a declined round trains"), argv=[]) == 75
    line = f"No in-job restart: {HARDWARE}"
    printed = [text for text in capsys.readouterr().out.splitlines() if line in text]
    assert len(printed) == 1 and printed[0].startswith("[rank 1] "), printed


def test_a_gpu_that_fails_its_check_refuses_the_restart_as_a_hardware_fault(monkeypatch):
    def broken(*shape, device):
        raise RuntimeError("CUDA error: uncorrectable ECC error encountered")

    monkeypatch.setattr(in_job_restart.torch, "ones", broken)
    rank = SimpleNamespace(device=SimpleNamespace(type="cuda"), rank=3)
    line = device_problem(rank)
    assert line.startswith(
        "trainstack-fault:infrastructure:hardware RuntimeError: Rank 3 failed the GPU check before an "
        "in-job restart: RuntimeError: CUDA error: uncorrectable ECC error encountered"
    ), line
    assert reason_to_refuse(line) == line
    assert device_problem(SimpleNamespace(device=SimpleNamespace(type="cpu"), rank=0)) is None
