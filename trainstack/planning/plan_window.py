"""Whether a run fits inside its SageMaker training plan: the time it needs at the forecast's wall-clock
goodput against the time the plan's instances still run (`trainstack plan --profile`, docs/plan.md).

A training plan reserves capacity from its StartTime to its EndTime (DescribeTrainingPlan, botocore's
sagemaker model) and ends its instances 30 minutes before the reservation ends (DESIGN.md, round 6): the
usable window is EndTime - 30 min - max(now, StartTime). A run that needs more continues, after the plan
ends its instances, on the profile's next preference (or fails there if it has none).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

EARLY_END = timedelta(minutes=30)


@dataclass(frozen=True)
class PlanWindow:
    name: str
    start: datetime
    end: datetime  # the reservation's end; the instances end EARLY_END before it

    @property
    def instances_end(self) -> datetime:
        return self.end - EARLY_END

    def usable_hours(self, now: datetime) -> float:
        return max(0.0, (self.instances_end - max(now, self.start)).total_seconds() / 3600)


def read_window(sagemaker: Any, arn: str) -> PlanWindow | str:
    """The plan's window, or one line saying why it could not be read."""
    try:
        found = sagemaker.describe_training_plan(TrainingPlanName=arn)
    except ClientError as error:
        return f"training plan {arn} not checked: SageMaker answered {error.response['Error']['Code']}"
    except BotoCoreError as error:
        return f"training plan {arn} not checked: DescribeTrainingPlan could not be called ({error})"
    if "StartTime" not in found or "EndTime" not in found:
        return f"training plan {arn} not checked: it has no start and end time yet ({found.get('Status')})"
    return PlanWindow(found["TrainingPlanName"], found["StartTime"], found["EndTime"])


def window_line(window: PlanWindow, needed_hours: float, wall_clock_percent: float, now: datetime) -> str:
    """One sentence: whether `needed_hours` of wall-clock time fit the plan's remaining window."""
    usable = window.usable_hours(now)
    ends = f"{window.instances_end:%Y-%m-%d %H:%M} UTC, 30 minutes before the reservation ends"
    needs = f"{needed_hours:,.1f} h of wall-clock time at the forecast's {wall_clock_percent:.1f}% goodput"
    runs = f"{usable:,.1f} h more (until {ends})"
    if needed_hours <= usable:
        return f"fits training plan {window.name}: the run needs {needs}, and its instances run {runs}"
    return (
        f"cannot finish inside training plan {window.name}: the run needs {needs}, and the plan's instances "
        f"run {runs}; a checkpoint before then lets it continue on the next preference"
    )
