"""Timestamps as Step Functions writes them: ISO 8601 in UTC with milliseconds and `Z`
(`2019-03-26T20:14:13.192Z`).

Sources: the context object's `Execution.StartTime` and `State.EnteredTime` (developer guide, "Accessing
execution data from the Context object in Step Functions": "StartTime": "2019-03-26T20:14:13.192Z");
timestamps in aws-sdk integration results, which Step Functions writes the same way (a DescribeStacks
result in a state machine: `"CreationTime": "2013-08-23T01:02:15.422Z"`, sam-goodwin/functionless issue
489; LocalStack's interpreter changed to this form in localstack/localstack pull request 9702). botocore
gives moto's interpreter `datetime`s, which Python writes as `2026-12-05 13:02:09.311673+00:00`, and moto
writes EnteredTime with microseconds and `+00:00`: jsonata 2.0.6's `$toMillis` refuses the first.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def aws_timestamp(moment: datetime) -> str:
    """`YYYY-MM-DDTHH:MM:SS.mmmZ` in UTC (a naive datetime is taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def write_aws_timestamps(container: Any) -> None:
    """Replace, in place, every datetime inside the dicts and lists of `container` with aws_timestamp."""
    items = container.items() if isinstance(container, dict) else enumerate(container)
    for key, value in list(items):
        if isinstance(value, datetime):
            container[key] = aws_timestamp(value)
        elif isinstance(value, dict | list):
            write_aws_timestamps(value)
