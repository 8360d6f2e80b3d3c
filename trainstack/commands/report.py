"""`trainstack report RUN [--out FILE]`: one self-contained HTML page of a run, to open or send."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from trainstack import runs
from trainstack.commands.common import Pipeline, UsageError, add_pipeline_command, one_line_failures
from trainstack.prices import offline_training_prices
from trainstack.report.collect import RunReport, collect
from trainstack.report.expected import forecast_line, interval_lines
from trainstack.report.goodput import ledger_of
from trainstack.report.render import render


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    add_pipeline_command(
        subparsers,
        "report",
        run,
        description="Write one self-contained HTML page (no network needed to open it) of a run's newest "
        "execution: its attempts on a time axis (back-offs, the checkpoint each resumed from), train and "
        "validation loss and throughput across attempts, instance type and estimated cost per attempt, and "
        "the goodput ledger: each attempt's billed time split into starting, kept training, checkpoint "
        "saving, lost work and idle in a hang, the waits between attempts and the dollars lost to failures. "
        "Reads the Step Functions histories, DescribeTrainingJob and the jobs' CloudWatch logs; in queue "
        "mode also DescribeServiceJob: every training job Batch started for an attempt (each billed), the "
        "time each attempt waited queued.",
        takes_run=True,
        arguments=lambda parser: parser.add_argument(
            "--out", type=Path, help="the HTML file to write (default: RUN-report.html)"
        ),
    )


@one_line_failures
def run(args: argparse.Namespace) -> int:
    pipeline = Pipeline.from_args(args)
    out = args.out or Path(f"{args.run.rsplit(':', 1)[-1]}-report.html")
    if not out.parent.is_dir():
        raise UsageError(f"--out {out}: the folder {out.parent} does not exist")
    execution = pipeline.execution_of(args.run)
    report = collect_run(pipeline, execution)
    forecast = [
        forecast_line(report, ledger_of(report, runs.clock()), pipeline.settings),
        *interval_lines(report),
    ]
    out.write_text(render(report, forecast), encoding="utf-8")
    print(
        f"wrote {out}: run {report.run_name}, {len(report.attempts)} attempt(s), "
        f"execution {execution['status']}"
    )
    return 0


def collect_run(pipeline: Pipeline, execution: dict[str, Any]) -> RunReport:
    """What the report shows of one execution (also `trainstack status`'s goodput line)."""
    report = collect(
        pipeline.client("stepfunctions"),
        pipeline.run_reader("sagemaker"),
        pipeline.run_reader("logs"),
        execution,
        pipeline.runs.project,
        pipeline.batch(),
        pipeline.queue_name,
    )
    # The run's profile: the input's, else the first (the pipeline's default).
    given = json.loads(execution.get("input") or "{}")
    name = given.get("profile") if isinstance(given, dict) else None
    profiles = pipeline.runs.profiles
    report.max_cost_usd = next((p for p in profiles if p.name == name), profiles[0]).max_cost_usd
    # The prices the pipeline's cost cap counts by (the synthesized machines carry the offline table).
    report.prices = offline_training_prices(pipeline.region)
    return report
