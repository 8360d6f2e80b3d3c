"""The run report as one HTML page with inline SVG: no script, no network (its Content-Security-Policy
forbids every fetch, so the page shows the same mailed, archived or opened offline)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from html import escape

from trainstack import quota, runs
from trainstack.model_versions import run_facts
from trainstack.prices import TrainingPrices
from trainstack.report.charts import (
    TOKENS_PER_SECOND,
    TRAIN_LOSS,
    VALIDATION_LOSS,
    attempt_colour,
    goodput_section,
    metric_chart,
    timeline,
)
from trainstack.report.collect import Attempt, RunReport
from trainstack.report.goodput import ledger_of
from trainstack.runs import hms

STYLE = """
body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1000px; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; }
dl { display: grid; grid-template-columns: max-content auto; gap: 4px 16px; }
dt { color: #666; } dd { margin: 0; word-break: break-all; }
table { border-collapse: collapse; font-size: 13px; } td, th { border: 1px solid #ddd; padding: 4px 8px; }
th { background: #f4f4f4; text-align: left; } .swatch { display: inline-block; width: 12px; height: 12px; }
svg text { font-size: 11px; fill: #333; } .note { color: #666; font-size: 12px; }
.legend { font-size: 12px; display: flex; gap: 18px; margin: 4px 0 0 70px; }
"""


def render(report: RunReport, forecast: Sequence[str] = ()) -> str:
    """The page; `forecast`: the forecast goodput beside the measured one (trainstack.report.expected)."""
    execution = report.execution
    cost = report.cost_usd
    output = report.output
    facts = {
        "Execution": f"{execution['status']} ({execution['executionArn']})",
        "Started": _stamp(execution["startDate"]),
        "Stopped": _stamp(execution["stopDate"]) if execution.get("stopDate") else "running",
        "Attempts": str(len(report.attempts)),
        "Estimated cost": f"${cost:,.2f}"
        if cost is not None
        else "unknown (an instance type has no recorded price)",
        "Model": output.get("modelArtifacts", "-"),
        "Checkpoints": output.get("checkpointUri", "-"),
        **run_facts(output.get("modelPackage")),
    }
    if execution.get("error"):
        facts["Error"] = f"{execution['error']}: {execution.get('cause', '')}"
    if board := tensorboard_command(report.attempts):
        facts["TensorBoard"] = board
    listing = "".join(f"<dt>{escape(k)}</dt><dd>{escape(str(v))}</dd>" for k, v in facts.items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>Run {escape(report.run_name)}</title><style>{STYLE}</style></head>
<body>
<h1>Run {escape(report.run_name)}</h1>
<dl>{listing}</dl>
<h2>Attempts over time</h2>
{timeline(report)}
<h2>Goodput</h2>
{goodput_section(ledger_of(report, runs.clock()))}
<div id="goodput-forecast">{"".join(f"<p>{escape(line)}</p>" for line in forecast)}</div>
<h2>Loss by step</h2>
{metric_chart("loss", report.attempts, "loss", [(TRAIN_LOSS, "train"), (VALIDATION_LOSS, "validation")])}
<h2>Throughput by step</h2>
{metric_chart("throughput", report.attempts, "tokens/s", [(TOKENS_PER_SECOND, "")])}
<h2>Attempts</h2>
{attempt_table(report.attempts, report.prices)}
<p class="note">Cost: billable instance-seconds (BillableTimeInSeconds, else training time) at SageMaker's
{escape(_prices_note(report))}. Data: Step Functions execution histories (the pipeline and
each attempt execution), DescribeTrainingJob, and the jobs' log lines in CloudWatch Logs; in queue mode
AWS Batch's DescribeServiceJob (Queued: time the service job waited for a place, RUNNABLE).</p>
</body></html>
"""


def _prices_note(report: RunReport) -> str:
    if report.prices is None:
        return "on-demand list price: none (no region given, nothing priced)"
    return report.prices.sentence(
        attempt.instance_type for attempt in report.training_jobs if attempt.instance_type
    )


def tensorboard_command(attempts: Sequence[Attempt]) -> str | None:
    """How to open the jobs' TensorBoard data (each job's TensorBoardOutputConfig.S3OutputPath), every
    attempt as a run of its own."""
    paths = [
        (f"attempt{a.number}", a.job["TensorBoardOutputConfig"]["S3OutputPath"])
        for a in attempts
        if "TensorBoardOutputConfig" in a.job
    ]
    if len(paths) <= 1:
        return f"tensorboard --logdir {paths[0][1]}" if paths else None
    return "tensorboard --logdir_spec " + ",".join(f"{name}:{path}" for name, path in paths)


def _classification(attempt: Attempt, attempts: Sequence[Attempt]) -> str:
    """The attempt's failure class and whether the pipeline retried it (another attempt followed), or the
    quota SageMaker refused its create for; and the slow hosts its log flagged."""
    notes = [f"slow host: {slow.describe()}" for slow in attempt.slow_hosts]
    if attempt.quota:
        notes.insert(0, quota.describe(attempt.quota))
    elif attempt.classification is not None:
        retried = attempt is not attempts[-1]
        notes.insert(
            0, attempt.classification + (", retried from the checkpoint" if retried else ", not retried")
        )
    return "; ".join(notes) or "-"


def attempt_table(attempts: Sequence[Attempt], prices: TrainingPrices | None = None) -> str:
    """A row per training job: in queue mode one per job Batch started for the attempt."""
    rows = []
    jobs = [(job, _service_job_notes(a, n)) for a in attempts for n, job in enumerate(a.training_jobs, 1)]
    for attempt, notes in jobs:
        reason = attempt.job.get("FailureReason", "")
        resumed = (
            f"step {attempt.resumed_from[1]} ({attempt.resumed_checkpoint})" if attempt.resumed_from else "-"
        )
        seconds, waited, cost = attempt.billed_seconds, attempt.queue_wait_seconds, attempt.cost_usd(prices)
        cells = [
            f'<span class="swatch" style="background:{attempt_colour(attempt)}"></span> {attempt.number}',
            escape(attempt.job_name + (f" ({notes})" if notes else "")),
            hms(waited) if waited is not None else "-",
            escape(f"{attempt.instance_count} x {attempt.instance_type}" if attempt.instance_type else "-"),
            escape(attempt.status + (f": {reason}" if reason else "")),
            escape(_classification(attempt, attempts)),
            escape(resumed),
            f"{seconds:,.0f} s" if seconds is not None else "-",
            f"${cost:,.2f}" if cost is not None else "-",
        ]
        rows.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")
    head = "".join(
        f"<th>{name}</th>"
        for name in (
            "#",
            "Training job",
            "Queued",
            "Instances",
            "Status",
            "Classification",
            "Resumed from",
            "Billed",
            "Estimated cost",
        )
    )
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _service_job_notes(attempt: Attempt, number: int) -> str:
    """Queue mode: the attempt's service job, and which of the training jobs Batch started for it."""
    service_job = attempt.service_job.get("jobName")
    notes = [f"service job {service_job}"] if service_job else []
    if len(attempt.training_jobs) > 1:
        notes.append(f"Batch job {number} of {len(attempt.training_jobs)}")
    return ", ".join(notes)


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S %Z").strip()
