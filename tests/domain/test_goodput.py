"""The goodput ledger: every billed second of every attempt in exactly one part, on a worked example (a
hang, then a resumed attempt) and on generated attempts."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainstack.prices import offline_training_prices
from trainstack.report.charts import PART_COLOURS
from trainstack.report.collect import Attempt, RunReport, Span
from trainstack.report.goodput import HANG, KEPT, LOST, PARTS, SAVING, STARTING, ledger_of
from trainstack.report.progress import Pause, Progress, read_progress
from trainstack.report.render import render
from trainstack.runs import hms

START = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)
PRICES = offline_training_prices("us-east-1")
P4D_HOURLY = PRICES.hourly_usd("ml.p4d.24xlarge")  # trainstack.prices: ml.p4d.24xlarge on demand
HANG_REASON = (
    "AlgorithmError: trainstack-fault:infrastructure:hang: no optimizer step for 600 s after step 50 (rank 1)"
)


def at(minutes: float) -> datetime:
    return START + timedelta(minutes=minutes)


def job(status: str, created: float, billed_from: float, training: tuple[float, float], ended: float, **more):
    return {
        "TrainingJobStatus": status,
        "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2},
        "CreationTime": at(created),
        "TrainingStartTime": at(billed_from),
        "TrainingEndTime": at(ended),
        "SecondaryStatusTransitions": [
            {"Status": "Starting", "StartTime": at(created), "EndTime": at(billed_from + 2)},
            {"Status": "Training", "StartTime": at(training[0]), "EndTime": at(training[1])},
        ],
        **more,
    }


def pause(step: int, minute: float, seconds: float = 30) -> Pause:
    return Pause(step, at(minute), at(minute) + timedelta(seconds=seconds))


def hang_then_resume() -> RunReport:
    """Attempt 1 (2 x ml.p4d.24xlarge) hangs after step 50 and the watchdog ends it at minute 50; attempt 2
    resumes from its step-40 checkpoint, after a 2-minute back-off, and completes."""
    first = Attempt(1, "run-1", started=at(0), ended=at(51))
    first.job = job("Failed", 0, 4, (6, 50), 50, FailureReason=HANG_REASON)
    first.progress = Progress(
        ready=at(8),
        steps=[(10 * n, at(8 + 4 * n)) for n in range(1, 6)],  # step 50 logged at minute 28
        pauses=[pause(20, 16), pause(40, 24)],
        saved={20: at(17), 40: at(25)},
    )
    second = Attempt(2, "run-2", started=at(52), ended=at(88), resumed_from=("/opt/ml/checkpoints/s40", 40))
    second.job = job("Completed", 52, 55, (57, 85), 87)
    second.progress = Progress(
        ready=at(60), steps=[(100, at(84))], pauses=[pause(60, 70)], saved={60: at(71)}
    )
    execution = {"executionArn": "arn:aws:states:us-east-1:1:execution:p:run", "status": "SUCCEEDED"}
    execution |= {"startDate": START, "stopDate": at(88)}
    return RunReport("run", execution, [first, second], [Span("back-off", at(50), at(52))], prices=PRICES)


def test_a_hang_and_a_resume_split_into_parts_that_add_up_to_the_billed_time():
    ledger = ledger_of(hang_then_resume(), now=at(100))
    first, second = ledger.attempts
    # Billed 4 -> 50: starting until the loop's start (8), kept until step 40 (24) less the step-20 pause,
    # lost until the last logged step (28) less the step-40 pause, then idle until the watchdog's failure.
    assert first.billed_ms == 46 * 60_000
    assert first.parts_ms == {
        STARTING: 240_000,
        KEPT: 930_000,
        SAVING: 60_000,
        LOST: 210_000,
        HANG: 1_320_000,
    }
    # Billed 55 -> 87: uploading after the Training phase (85 -> 87) counts as saving.
    assert second.parts_ms == {STARTING: 300_000, KEPT: 1_470_000, SAVING: 150_000, LOST: 0, HANG: 0}
    assert second.restarted and not first.restarted
    assert (first.waiting_seconds, second.waiting_seconds, ledger.waiting_seconds) == (240, 180, 540)
    assert ledger.goodput_percent == 100 * 2 * (930 + 1470) / (2 * (2760 + 1920))
    # Lost to failures: attempt 1's lost work and hang, and attempt 2's start, on 2 instances.
    assert ledger.lost_usd == pytest.approx(P4D_HOURLY * 2 * (210 + 1320 + 300) / 3600)
    assert ledger.summary() == (
        "goodput: 51.3% (1:20:00 of 2:36:00 billed instance time kept); lost to failures: $25.67 "
        "(lost work 0:07:00, idle in a hang 0:44:00, restarts 0:10:00); waits 0:09:00 (not billed: "
        "back-offs 0:02:00, queued or provisioning 0:07:00)"
    )


def test_managed_spot_shares_the_billable_time_out_by_the_same_proportions():
    report = hang_then_resume()
    report.attempts[0].job["BillableTimeInSeconds"] = 1380  # half of the 46 minutes trained
    first = ledger_of(report, now=at(100)).attempts[0]
    assert first.parts_ms == {STARTING: 120_000, KEPT: 465_000, SAVING: 30_000, LOST: 105_000, HANG: 660_000}


def test_without_a_next_attempt_the_newest_complete_checkpoint_is_kept_and_a_failure_is_no_hang():
    report = hang_then_resume()
    failed = report.attempts[0]
    failed.job["FailureReason"] = "AlgorithmError: ExecuteUserScriptError: ExitCode 1"
    failed.progress.saved = {20: at(17)}  # the step-40 save never completed
    report.attempts = [failed]
    (only,) = ledger_of(report, now=at(100)).attempts
    # Kept until step 20 (minute 16), lost from there to the end of training, less the step-40 pause.
    assert only.parts_ms == {STARTING: 240_000, KEPT: 480_000, SAVING: 60_000, LOST: 1_980_000, HANG: 0}
    assert not only.restarted


def test_a_running_attempt_is_billed_until_now_and_an_attempt_without_a_job_bills_nothing():
    running = Attempt(1, "run-1", started=at(0), ended=None)
    running.job = job("InProgress", 0, 4, (6, 50), 50)
    del running.job["TrainingEndTime"], running.job["SecondaryStatusTransitions"][1]["EndTime"]
    never = Attempt(2, "run-2", started=at(0), ended=at(1))
    report = RunReport("run", {"startDate": START}, [running, never], [])
    ledger = ledger_of(report, now=at(14))
    assert ledger.attempts[0].billed_ms == 10 * 60_000 and ledger.attempts[0].parts_ms[STARTING] == 120_000
    assert ledger.attempts[1].billed_ms == 0 and set(ledger.attempts[1].parts_ms.values()) == {0}
    assert ledger_of(RunReport("run", {}, [never], []), now=at(14)).summary() == (
        "goodput: no billed time yet; waits 0:00:00 (not billed: back-offs 0:00:00, queued or provisioning "
        "0:00:00)"
    )


def test_progress_is_read_from_the_log_lines_train_py_writes():
    lines = [
        (8, "2026-11-01 08:08:00,000 INFO Training tiny on 2 ranks (cpu, ddp): global batch 8 ..."),
        (16, "step=20/100 train_loss=4.5000 grad_norm=1.1000 lr=2.000e-03 tokens_per_sec=2100.0"),
        (16.5, "checkpoint_step=20 paused_seconds=30.000"),
        (17, "Saved checkpoint /opt/ml/checkpoints/step_000000020."),
        (18, "step=20 val_loss=4.2500"),
    ]
    events = [{"timestamp": int(at(minute).timestamp() * 1000), "message": line} for minute, line in lines]
    progress = read_progress(events)
    assert progress.ready == at(8)
    assert progress.steps == [(20, at(16)), (20, at(18))]
    assert progress.pauses == [pause(20, 16)] and progress.saved == {20: at(17)}
    assert progress.reached(20, first_step=0) == at(16)
    assert progress.reached(10, first_step=0) == at(12)  # between the loop's start (step 0) and step 20
    assert progress.reached(30, first_step=0) == at(20)  # at the pace of the last logged steps
    assert progress.reached(20, first_step=20) is None  # the job started there: not its step


def test_a_checkpoint_whose_lines_were_lost_is_placed_at_the_logged_pace():
    """A job stopped with SIGTERM saves a checkpoint that its log may not show (the lines go with the
    process that relayed them); the next attempt resumed from it."""
    report = hang_then_resume()
    first, second = report.attempts
    first.job["FailureReason"] = "CapacityError: Unable to provision requested ML compute capacity."
    second.resumed_from = ("/opt/ml/checkpoints/step_000000060", 60)
    ledger = ledger_of(report, now=at(100))
    # Steps 40 and 50 were logged at minutes 24 and 28: step 60 at 32; kept until then less two pauses.
    assert ledger.attempts[0].parts_ms == {
        STARTING: 240_000,
        KEPT: 1_380_000,
        SAVING: 60_000,
        LOST: 1_080_000,
        HANG: 0,
    }


def test_the_page_draws_a_bar_per_attempt_in_the_parts_colours():
    page = render(hang_then_resume())
    assert '<svg id="goodput"' in page and "goodput: 51.3%" in page
    for part in PARTS:
        assert f'fill="{PART_COLOURS[part]}"' in page, part
    assert "<title>idle in a hang: 0:22:00 x 2 instance(s) ($18.52)</title>" in page


def test_the_waits_per_attempt_and_the_back_offs_add_up_to_the_summarys():
    """Issue 49: each attempt showed 0:00:00 waiting beside a summary of 1:06 (the back-offs)."""
    report = hang_then_resume()
    ledger = ledger_of(report, now=at(100))
    table = render(report).split('<svg id="goodput"')[1].split("</table>")[0]
    rows = [re.findall(r"<td>([^<]*)</td>", row) for row in table.split("<tr>")[2:]]
    waiting = [row[len(PARTS) + 2] for row in rows]
    assert [row[0] for row in rows] == ["1", "2", "back-offs"]
    total = sum(int(h) * 3600 + int(m) * 60 + int(sec) for h, m, sec in (w.split(":") for w in waiting))
    assert total == ledger.waiting_seconds == 9 * 60 and waiting[-1] == "0:02:00"
    assert f"waits {hms(total)} (not billed: back-offs 0:02:00" in ledger.summary()


SECONDS = st.floats(min_value=-600, max_value=7200, allow_nan=False)


@st.composite
def attempts(draw) -> list[Attempt]:
    made = []
    for number in range(1, draw(st.integers(1, 4)) + 1):
        base = at(number * 200)

        def moment(base=base) -> datetime:
            return base + timedelta(seconds=draw(SECONDS))

        attempt = Attempt(number, f"run-{number}", started=base, ended=None)
        if draw(st.booleans()):  # else the job was never created
            start = moment()
            attempt.job = {
                "TrainingJobStatus": draw(st.sampled_from(["Completed", "Failed", "Stopped", "InProgress"])),
                "ResourceConfig": {
                    "InstanceType": "ml.p5.48xlarge",
                    "InstanceCount": draw(st.integers(1, 64)),
                },
                "TrainingStartTime": start,
                "FailureReason": draw(st.sampled_from(["", HANG_REASON, "CapacityError: no capacity"])),
                "SecondaryStatusTransitions": [
                    {"Status": "Training", "StartTime": moment(), "EndTime": moment()}
                ][: draw(st.integers(0, 1))],
            }
            if draw(st.booleans()):
                attempt.job["TrainingEndTime"] = start + timedelta(seconds=draw(st.floats(0, 90000)))
            if draw(st.booleans()):  # managed spot, or a figure that disagrees with the times
                attempt.job["BillableTimeInSeconds"] = draw(st.integers(0, 90000))
        steps = sorted(draw(st.lists(st.integers(1, 500), max_size=6)))
        attempt.progress = Progress(
            ready=moment() if draw(st.booleans()) else None,
            steps=[(step, moment()) for step in steps],
            pauses=[Pause(step, moment(), moment()) for step in steps[::2]],
            saved={step: moment() for step in steps[1::2]},
        )
        if steps and draw(st.booleans()):
            attempt.resumed_from = ("/opt/ml/checkpoints/step", draw(st.sampled_from(steps)))
        made.append(attempt)
    return made


@settings(max_examples=300, deadline=None)
@given(attempts(), st.floats(min_value=0, max_value=100000))
def test_every_billed_millisecond_is_in_exactly_one_part(generated, now_offset):
    ledger = ledger_of(RunReport("run", {}, generated, []), now=at(0) + timedelta(seconds=now_offset))
    for attempt, entry in zip(generated, ledger.attempts, strict=True):
        assert sorted(entry.parts_ms) == sorted(PARTS)
        assert sum(entry.parts_ms.values()) == entry.billed_ms and min(entry.parts_ms.values()) >= 0
        if attempt.job.get("BillableTimeInSeconds") is not None:
            assert entry.billed_ms == attempt.job["BillableTimeInSeconds"] * 1000
    if ledger.goodput_percent is not None:
        assert 0 <= ledger.goodput_percent <= 100


def test_the_ledger_shows_the_billed_cost_against_the_profiles_cost_cap():
    report = hang_then_resume()
    report.max_cost_usd = 200
    ledger = ledger_of(report, now=at(100))
    billed = P4D_HOURLY * 2 * (2760 + 1920) / 3600
    assert ledger.billed_usd == pytest.approx(billed)
    assert ledger.summary().endswith(
        f"; billed ${billed:,.2f} of the $200.00 cost cap ({100 * billed / 200:.0f}%)"
    )


def test_a_training_job_batch_started_before_the_latest_is_ledgered_as_a_failed_attempt():
    """Queue mode: the same two jobs as one attempt's, the first lost by Batch (collect.py's earlier_jobs):
    the same split, kept up to the checkpoint the next job resumed from, the same billed cost, a row each."""
    direct = hang_then_resume()
    first, second = direct.attempts
    second.number, second.started = 1, first.started
    second.earlier_jobs = [first]
    queued = RunReport("run", direct.execution, [second], [], max_cost_usd=200, prices=PRICES)
    expected = ledger_of(hang_then_resume(), now=at(100))
    ledger = ledger_of(queued, now=at(100))
    assert [row.label for row in ledger.attempts] == ["attempt 1, Batch job 1", "attempt 1, Batch job 2"]
    assert [row.parts_ms for row in ledger.attempts] == [row.parts_ms for row in expected.attempts]
    assert [row.restarted for row in ledger.attempts] == [False, True]  # its start: lost to failures
    assert ledger.lost_usd == pytest.approx(expected.lost_usd)
    billed = P4D_HOURLY * 2 * (2760 + 1920) / 3600
    assert ledger.billed_usd == pytest.approx(billed) and queued.cost_usd == pytest.approx(billed)
    assert f"; billed ${billed:,.2f} of the $200.00 cost cap" in ledger.summary()
