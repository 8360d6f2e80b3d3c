"""The run report's charts, as inline SVG: the attempts over time, loss and throughput by step, the
goodput ledger's bars and table (the page around them: trainstack/report/render.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape

from trainstack.report.collect import Attempt, RunReport
from trainstack.report.goodput import HANG, KEPT, LOST, PARTS, SAVING, STARTING, RunLedger
from trainstack.runs import hms

# One colour per attempt, everywhere on the page (the browser test looks for them in the screenshot).
ATTEMPT_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
BACKOFF_COLOUR = "#9e9e9e"
MARKER_COLOUR = "#555555"  # where an attempt resumed
# The goodput ledger's parts: none within the browser test's tolerance of an attempt's colour.
PART_COLOURS = {STARTING: "#bdbdbd", KEPT: "#1b5e20", SAVING: "#f9a825", LOST: "#b71c1c", HANG: "#4a148c"}
LEDGER_TOP, LEDGER_ROW, LEDGER_BAR = 8, 34, 16  # the goodput chart: attempt N's bar at TOP + (N-1) ROW
WIDTH, PLOT_LEFT, PLOT_RIGHT = 960, 70, 20
TRAIN_LOSS, VALIDATION_LOSS, TOKENS_PER_SECOND = "train:loss", "validation:loss", "train:tokens_per_second"


def attempt_colour(attempt: Attempt) -> str:
    return ATTEMPT_COLOURS[(attempt.number - 1) % len(ATTEMPT_COLOURS)]


def timeline(report: RunReport) -> str:
    """One row per attempt (its execution, the job's phases under it) and one for the back-offs."""
    start = report.execution["startDate"]
    ends = (
        [report.execution.get("stopDate")]
        + [a.ended for a in report.attempts]
        + [b.end for b in report.backoffs]
    )
    end = max([stamp for stamp in ends if stamp] + [a.started for a in report.attempts] + [start])
    axis = Axis(0, max((end - start).total_seconds(), 1), PLOT_LEFT + 110, WIDTH - PLOT_RIGHT)
    row_height, top = 44, 10
    parts = []
    rows = [("back-offs", None)] + [(f"attempt {a.number}", a) for a in report.attempts]
    for index, (label, attempt) in enumerate(rows):
        y = top + index * row_height
        parts.append(f'<text x="4" y="{y + 16}">{escape(label)}</text>')
        if attempt is None:
            for backoff in report.backoffs:
                seconds = (backoff.end - backoff.start).total_seconds()
                parts.append(
                    _bar(axis, start, backoff.start, backoff.end, y + 2, 14, BACKOFF_COLOUR, backoff.label)
                )
                left = axis.to_x((backoff.start - start).total_seconds())
                parts.append(f'<text x="{left:.1f}" y="{y + 30}">{escape(hms(seconds))}</text>')
            continue
        colour = attempt_colour(attempt)
        finish = attempt.ended or end
        reason = attempt.job.get("FailureReason", "").split(":")[0]
        where = f" on {attempt.instance_count} x {attempt.instance_type}" if attempt.instance_type else ""
        detail = f"{attempt.job_name}{where}: {attempt.status}" + (f" ({reason})" if reason else "")
        detail += (
            f", resumed from step {attempt.resumed_from[1]}" if attempt.resumed_from else ", from scratch"
        )
        parts.append(_bar(axis, start, attempt.started, finish, y + 2, 14, colour, detail))
        for phase in attempt.phases:
            parts.append(
                _bar(axis, start, phase.start, phase.end, y + 17, 6, colour, phase.label, opacity=0.5)
            )
        # Under the bar, from its start, or ending at its end when it starts in the right half.
        left, right = (axis.to_x((when - start).total_seconds()) for when in (attempt.started, finish))
        anchor, label_x = ("start", left) if left < WIDTH / 2 else ("end", right)
        parts.append(f'<text x="{label_x:.1f}" y="{y + 34}" text-anchor="{anchor}">{escape(detail)}</text>')
    height = top + len(rows) * row_height + 42
    ticks = axis.ticks()
    axis_y = height - 36
    parts.append(f'<line x1="{axis.left}" x2="{axis.right}" y1="{axis_y}" y2="{axis_y}" stroke="#999"/>')
    for tick in ticks:
        x = axis.to_x(tick)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{axis_y}" y2="{axis_y + 4}" stroke="#999"/>')
        parts.append(f'<text x="{x:.1f}" y="{axis_y + 16}" text-anchor="middle">{hms(tick)}</text>')
    parts.append(
        f'<text x="{axis.right}" y="{height - 1}" text-anchor="end">time since the run started</text>'
    )
    return _svg("timeline", height, parts)


def _bar(
    axis,
    origin: datetime,
    start: datetime,
    end: datetime,
    y: float,
    height: float,
    colour: str,
    title: str,
    opacity: float = 1.0,
) -> str:
    x1 = axis.to_x((start - origin).total_seconds())
    x2 = max(axis.to_x((end - origin).total_seconds()), x1 + 2)
    return (
        f'<rect x="{x1:.1f}" y="{y}" width="{x2 - x1:.1f}" height="{height}" fill="{colour}" '
        f'fill-opacity="{opacity}"><title>{escape(title)}</title></rect>'
    )


def metric_chart(
    chart_id: str, attempts: Sequence[Attempt], y_label: str, metrics: list[tuple[str, str]]
) -> str:
    series = [
        (attempt, name, kind, attempt.metrics[name])
        for attempt in attempts
        for name, kind in metrics
        if attempt.metrics.get(name)
    ]
    if not series:
        return f'<p id="{chart_id}" class="note">No {y_label} values in the jobs\' logs.</p>'
    steps = [step for *_, points in series for step, _ in points]
    values = [value for *_, points in series for _, value in points if math.isfinite(value)]
    height = 260
    x = Axis(0, max(steps), PLOT_LEFT, WIDTH - PLOT_RIGHT)
    y = Axis(min(values + [0.0]), max(values) if values else 1.0, height - 40, 14)
    parts = [_frame(x, y, height, "step", y_label)]
    for attempt in attempts:
        if attempt.resumed_from and attempt.metrics:
            rx, step = x.to_x(attempt.resumed_from[1]), attempt.resumed_from[1]
            parts.append(
                f'<line x1="{rx:.1f}" x2="{rx:.1f}" y1="{y.right}" y2="{y.left}" '
                f'stroke="{MARKER_COLOUR}" stroke-dasharray="4 3"/>'
                f'<text x="{rx + 3:.1f}" y="{y.right + 10}">'
                f"attempt {attempt.number} resumes at step {step}</text>"
            )
    legend = []
    for attempt, name, kind, points in series:
        colour = attempt_colour(attempt)
        finite = [(s, v) for s, v in points if math.isfinite(v)]
        if name != VALIDATION_LOSS:
            path = " ".join(f"{x.to_x(s):.1f},{y.to_x(v):.1f}" for s, v in finite)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2.5"/>')
        # A dot per logged value too (validation: dots only), so that a single value still shows.
        radius = 5 if name == VALIDATION_LOSS else 3
        parts.extend(
            f'<circle cx="{x.to_x(s):.1f}" cy="{y.to_x(v):.1f}" r="{radius}" fill="{colour}"/>'
            for s, v in finite
        )
        shape = "large dots" if name == VALIDATION_LOSS else "line"
        text = " ".join(part for part in (f"attempt {attempt.number}", kind, f"({shape})") if part)
        legend.append(f'<span><span class="swatch" style="background:{colour}"></span> {text}</span>')
    # The legend is HTML beside the plot, so the plot holds only data in the attempts' colours.
    return _svg(chart_id, height, parts) + f'<div class="legend">{"".join(legend)}</div>'


def goodput_section(ledger: RunLedger) -> str:
    """The ledger's summary line, a stacked bar per attempt (its billed instance time by part, on one
    scale for every attempt) and the figures as a table."""
    summary = f'<p id="goodput-summary">{escape(ledger.summary())}</p>'
    if not ledger.attempts:
        return summary
    longest = max(a.billed_ms * a.instance_count for a in ledger.attempts) or 1
    left, right = PLOT_LEFT + 110, WIDTH - PLOT_RIGHT
    parts, rows = [], []
    for index, attempt in enumerate(ledger.attempts):
        y, x = LEDGER_TOP + index * LEDGER_ROW, float(left)
        parts.append(f'<text x="4" y="{y + 13}">{escape(attempt.label)}</text>')
        for part in PARTS:
            ms = attempt.parts_ms[part]
            if not ms:
                continue
            width = ms * attempt.instance_count / longest * (right - left)
            title = f"{part}: {hms(ms / 1000)} x {attempt.instance_count} instance(s)" + _usd(attempt.usd(ms))
            parts.append(
                f'<rect x="{x:.1f}" y="{y}" width="{max(width, 1):.1f}" height="{LEDGER_BAR}" '
                f'fill="{PART_COLOURS[part]}"><title>{escape(title)}</title></rect>'
            )
            x += width
        billed = attempt.billed_ms / 1000
        kept = f", {100 * attempt.parts_ms[KEPT] / attempt.billed_ms:.0f}% kept" if attempt.billed_ms else ""
        note = f"billed {hms(billed)} x {attempt.instance_count}{kept}" if billed else "nothing billed"
        parts.append(f'<text x="{left}" y="{y + 28}">{escape(note)}</text>')
        cells = [attempt.label.removeprefix("attempt ")]
        cells += [hms(attempt.parts_ms[part] / 1000) for part in PARTS]
        lost = attempt.usd(attempt.lost_to_failures_ms)
        cells += [hms(billed), hms(attempt.waiting_seconds), f"${lost:,.2f}" if lost is not None else "-"]
        rows.append("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in cells) + "</tr>")
    # The back-offs between attempts wait too: with them the column adds up to the summary's waits.
    backoffs = ["back-offs", *[""] * len(PARTS), "", hms(ledger.backoff_seconds), ""]
    rows.append("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in backoffs) + "</tr>")
    legend = "".join(
        f'<span><span class="swatch" style="background:{PART_COLOURS[part]}"></span> {part}</span>'
        for part in PARTS
    )
    head = "".join(
        f"<th>{escape(name)}</th>"
        for name in ("#", *PARTS, "billed", "waiting (not billed)", "lost to failures")
    )
    return (
        summary
        + _svg("goodput", LEDGER_TOP + len(ledger.attempts) * LEDGER_ROW, parts)
        + f'<div class="legend">{legend}</div>'
        + f"<table><tr>{head}</tr>{''.join(rows)}</table>"
        + '<p class="note">Per instance, H:MM:SS of the billed time (TrainingStartTime to TrainingEndTime, '
        "BillableTimeInSeconds with managed spot); moments inside a job from its log lines' timestamps "
        "(the training loop's start, step lines, checkpoint pauses and completed checkpoints), the kept "
        "point from the checkpoint the next attempt resumed from; lost to failures: lost work, idle in a "
        "hang and the start of each attempt that resumed after a failure. Queue mode: a row per training "
        "job AWS Batch started for an attempt (Batch job K), each billed.</p>"
    )


def _usd(usd: float | None) -> str:
    return f" (${usd:,.2f})" if usd is not None else ""


@dataclass(frozen=True)
class Axis:
    """Maps values low..high onto pixels left..right (right < left for a y axis, which grows upwards)."""

    low: float
    high: float
    left: float
    right: float

    def to_x(self, value: float) -> float:
        span = (self.high - self.low) or 1.0
        return self.left + (value - self.low) / span * (self.right - self.left)

    def ticks(self, count: int = 6) -> list[float]:
        span = (self.high - self.low) or 1.0
        raw = span / count
        step = 10 ** math.floor(math.log10(raw))
        step *= next(factor for factor in (1, 2, 5, 10) if step * factor >= raw)
        first = math.ceil(self.low / step) * step
        return [first + i * step for i in range(int((self.high - first) / step) + 1)]


def _frame(x: Axis, y: Axis, height: int, x_label: str, y_label: str) -> str:
    parts = [
        f'<line x1="{x.left}" x2="{x.right}" y1="{y.left}" y2="{y.left}" stroke="#999"/>',
        f'<line x1="{x.left}" x2="{x.left}" y1="{y.left}" y2="{y.right}" stroke="#999"/>',
        f'<text x="{x.right}" y="{height - 4}" text-anchor="end">{escape(x_label)}</text>',
        f'<text x="4" y="{y.right + 4}">{escape(y_label)}</text>',
    ]
    for tick in x.ticks():
        px = x.to_x(tick)
        parts.append(f'<text x="{px:.1f}" y="{y.left + 16}" text-anchor="middle">{tick:g}</text>')
    for tick in y.ticks(5):
        py = y.to_x(tick)
        parts.append(f'<line x1="{x.left}" x2="{x.right}" y1="{py:.1f}" y2="{py:.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{x.left - 6}" y="{py + 4:.1f}" text-anchor="end">{tick:g}</text>')
    return "".join(parts)


def _svg(element_id: str, height: int, parts: list[str]) -> str:
    return (
        f'<svg id="{element_id}" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}">{"".join(parts)}</svg>'
    )
