"""`make demo`'s path, smaller: the synthesized pipeline in the emulator, real local training processes,
a capacity loss on the first attempt, back-off, the second attempt resuming from its checkpoint, and a
model that loads with AutoModelForCausalLM."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.demo.browser import colour_pixels, load
from tests.demo.demo_process import run_demo
from training_scripts.metrics import WARMUP_STEPS
from trainstack.report.charts import (
    ATTEMPT_COLOURS,
    BACKOFF_COLOUR,
    LEDGER_BAR,
    LEDGER_ROW,
    LEDGER_TOP,
    PART_COLOURS,
)
from trainstack.report.goodput import KEPT, STARTING

# Attempt 1 loses its capacity once its first checkpoint (step CHECKPOINT_INTERVAL) is written; the steps
# after it (about 50 ms each) leave attempt 2 steps of its own to log, resumed from that checkpoint or from a
# stop checkpoint soon after, which train.py keeps (its last two) beside attempt 2's one at MAX_STEPS.
CHECKPOINT_INTERVAL = 20
MAX_STEPS = 40


@dataclass
class Demo:
    workdir: Path
    out: str
    assembly_directory: str


@pytest.fixture(scope="module")
def demo(default_app, tmp_path_factory) -> Demo:
    """One run of the demo, read by every test here (it trains twice: minutes on a loaded machine)."""
    _, _, assembly = default_app
    tmp_path = tmp_path_factory.mktemp("demo-run")
    out = run_demo(
        "localaws.demo",
        "--cdk-out",
        assembly.directory,
        "--workdir",
        str(tmp_path / "demo"),
        "--max-steps",
        str(MAX_STEPS),
        "--checkpoint-interval",
        str(CHECKPOINT_INTERVAL),
    )
    return Demo(tmp_path / "demo", out, assembly.directory)


def test_a_retraining_survives_a_capacity_loss_and_resumes_from_its_checkpoint(demo):
    out, tmp_path = demo.out, demo.workdir.parent
    assert (
        f"1/5 synthesized pipeline: {Path(demo.assembly_directory) / 'trainstack-pipeline.template.json'}"
        in out
    )
    # The CLI's live lines: the first attempt fails on capacity, the second completes.
    assert re.search(
        r"Z +\d+:\d\d:\d\d  RUNNING \| attempt 1 \| (\S+)-1 \| Failed / Failed$", out, re.MULTILINE
    )
    assert re.search(
        r"Z +\d+:\d\d:\d\d  SUCCEEDED \| attempt 2 \| (\S+)-2 \| Completed / Completed$", out, re.MULTILINE
    )
    assert '"attempts": 2' in out
    first = re.search(
        r"attempt 1: \S+ started from scratch, .*ended Failed: CapacityError: Unable to provision", out
    )
    assert first, out
    resumed = re.search(
        rf"attempt 2: \S+ resumed from the checkpoint of step (\d+), last logged step {MAX_STEPS}, "
        r"ended Completed",
        out,
    )
    assert resumed and CHECKPOINT_INTERVAL <= int(resumed.group(1)) < MAX_STEPS, out
    assert "loads with AutoModelForCausalLM: LlamaForCausalLM" in out
    # The checkpoints live in the folder standing for the run's checkpoint prefix, shared by both attempts:
    # attempt 1's first checkpoint, plus its stop checkpoint when it got past that step before the stop
    # (timing: on a loaded machine the stop can come while it is still at that step).
    checkpoints = list((tmp_path / "demo" / "s3").glob("*checkpoint*/*/step_*/COMPLETE"))
    assert len({path.parent.parent for path in checkpoints}) == 1
    assert f"step_{int(resumed.group(1)):09d}" in {path.parent.name for path in checkpoints}


def test_the_report_shows_both_attempts_in_a_browser(demo):
    report = demo.workdir / "report.html"
    assert f"wrote {report}: run " in demo.out and ", 2 attempt(s), execution SUCCEEDED" in demo.out
    page = load(report.resolve().as_uri(), ["timeline", "loss", "throughput", "goodput"])
    assert page.errors == []
    first, second = ATTEMPT_COLOURS[:2]
    resumed = int(re.search(r"attempt 2: \S+ resumed from the checkpoint of step (\d+)", demo.out).group(1))
    for chart in ("timeline", "loss", "throughput"):
        box = page.boxes[chart]
        assert box[2] - box[0] >= 900 and box[3] - box[1] >= 150, (chart, box)
        # Attempt 1 logs steps 5 to 20 at least: a bar, or a line 2.5 px wide across steps, more pixels of
        # its colour than its dots alone (about 30 each) would have. Attempt 2 resumes from step 20 or from
        # its stop checkpoint a few steps later (timing): it logs at least the steps to MAX_STEPS. Its
        # tokens/s leave out its first WARMUP_STEPS steps (training_scripts/metrics.py): resumed within
        # WARMUP_STEPS of the end, it would train only warm-up steps and draw no throughput point.
        assert colour_pixels(page.screenshot, box, first) > 150, (chart, first)
        if chart != "throughput" or MAX_STEPS - resumed > WARMUP_STEPS:
            assert colour_pixels(page.screenshot, box, second) > 15, (chart, second, resumed)
    assert colour_pixels(page.screenshot, page.boxes["timeline"], BACKOFF_COLOUR) > 20  # the back-off
    # The goodput ledger: a bar per attempt, its start (the toolkit, torchrun and the model's set-up: most
    # of a tiny demo's billed time) then training, kept: attempt 1's up to the checkpoint attempt 2 resumed.
    left, top, right, _ = page.boxes["goodput"]
    assert right - left >= 900
    for number in (1, 2):
        y = top + LEDGER_TOP + (number - 1) * LEDGER_ROW
        bar = (left, y, right, y + LEDGER_BAR)
        for part in (STARTING, KEPT):
            assert colour_pixels(page.screenshot, bar, PART_COLOURS[part]) > LEDGER_BAR * 5, (number, part)
    text = report.read_text()
    assert "resumes at step" in text and "CapacityError" in text


def test_each_attempt_uploads_its_tensorboard_scalars_where_its_request_says(demo):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    uploaded = re.findall(r"attempt \d: (\S+) .*; TensorBoard event files in (\S+)$", demo.out, re.MULTILINE)
    assert len(uploaded) == 2, demo.out
    for job, folder in uploaded:
        # The folder standing for s3://<artifacts>/<run>/<job>/tensorboard/ (TensorBoardOutputConfig).
        assert Path(folder).is_relative_to(demo.workdir / "s3") and Path(folder).parent.name == job
        events = EventAccumulator(folder)
        events.Reload()
        assert [event.step for event in events.Scalars("train/loss")], job


def test_the_retraining_is_approved_and_the_worse_second_run_is_rejected_with_the_comparison(demo):
    approved = re.search(r"registry: run \S+: version 1 Approved \(evaluation loss ([0-9.]+)\)", demo.out)
    rejected = re.search(
        r"registry: run \S+-worse: version 2 Rejected \(evaluation loss ([0-9.]+)\): rejected, worse than "
        r"the best approved model: evaluation loss \S+ vs \S+ of Approved version 1",
        demo.out,
    )
    assert approved and rejected, demo.out
    assert float(rejected.group(1)) > float(approved.group(1))
    # `trainstack models` lists both versions with their lineage.
    assert re.search(r"^trainstack-small-torchrun v1 +Approved +eval loss", demo.out, re.MULTILINE)
    assert re.search(r"^trainstack-small-torchrun v2 +Rejected +eval loss", demo.out, re.MULTILINE)
    assert "    data.trainingSetManifest = " in demo.out
    # The first run's report names its evaluation and its version's decision.
    report = (demo.workdir / "report.html").read_text()
    assert f"<dt>Evaluation</dt><dd>loss {float(approved.group(1)):.4f}, perplexity" in report
    assert re.search(r"<dt>Model version</dt><dd>arn:aws:sagemaker:\S+/1: Approved \(first version", report)


def test_each_job_logs_its_metrics_to_the_local_mlflow_store_standing_for_the_profiles_tracking_server(demo):
    import os

    from mlflow.tracking import MlflowClient

    from localaws.sagemaker.local_processes import ALLOW_FILE_STORE

    stands = re.search(
        r"mlflow: arn:aws:sagemaker:\S+:mlflow-tracking-server/(\S+) stands as the local store (\S+), "
        r"experiment (\S+):",
        demo.out,
    )
    assert stands, demo.out
    server, store, experiment = stands.groups()
    assert Path(store) == demo.workdir / "mlflow" / server
    attempts = re.findall(r"attempt \d: (\S+) (?:started from scratch|resumed from)", demo.out)
    worse = re.search(r"registry: run (\S+-worse): version 2", demo.out).group(1)
    os.environ.update(ALLOW_FILE_STORE)
    client = MlflowClient(Path(store).as_uri())
    runs = {
        run.info.run_name: run
        for run in client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    }
    # One MLflow run per training job, named after it (TRAINING_JOB_NAME), the evaluations log none.
    assert sorted(runs) == sorted([*attempts, f"{worse}-1"]), demo.out
    completed = runs[attempts[-1]]
    assert completed.data.params["max_steps"] == str(MAX_STEPS)
    steps = [metric.step for metric in client.get_metric_history(completed.info.run_id, "train/loss")]
    assert steps and steps[-1] == MAX_STEPS
    assert completed.data.metrics["validation/loss"] > 0
    # The demo's own lines say the same.
    line = rf"mlflow:   {re.escape(attempts[-1])}: FINISHED, train/loss at steps [\d, ]*{MAX_STEPS} "
    assert re.search(line, demo.out), demo.out


def test_the_report_bills_each_attempt_on_the_clock_its_time_axis_uses(demo):
    """Issue 49: the report drew attempt 1 over 8 emulated minutes and billed it 0:00:17 real seconds. On
    one clock attempt 1's billed time fits between the run's start and attempt 2's first live line (the
    back-off and the polls in between), and is most of it."""
    second_start = re.search(r"Z +(\d+):(\d\d):(\d\d)  RUNNING \| attempt 2 \|", demo.out, re.MULTILINE)
    hours, minutes, seconds = map(int, second_start.groups())
    before_second = hours * 3600 + minutes * 60 + seconds
    table = (demo.workdir / "report.html").read_text().split("<h2>Attempts</h2>")[1]
    billed = [int(figure.replace(",", "")) for figure in re.findall(r"<td>([\d,]+) s</td>", table)]
    assert len(billed) == 2, table
    assert before_second / 4 < billed[0] < before_second, (billed, before_second)
