"""The demo's CloudWatch Logs: each local job's log, as SageMaker delivers a training job's output.

SageMaker writes a job's stdout/stderr to log group `/aws/sagemaker/TrainingJobs`, one stream per host
named `<job>/algo-<N>-<epoch seconds>` (SageMaker developer guide, "Log Amazon SageMaker Events with
Amazon CloudWatch"; `trainstack logs` reads them by the `<job>/` prefix). SageMaker's agent stamps each
line as it reads it while the job runs; here a line is stamped with the time its own prefix gives
(train.py's and the toolkit's logging `%(asctime)s`, this machine's local time, read on the emulator's
clock as the job's other times are), a line without one
with the stamp before it, 1 ms apart at least so that lines keep their order. The report reads the same
text, and the goodput ledger the same moments, as on AWS.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from trainstack.runs import TRAINING_LOG_GROUP

# PutLogEvents accepts at most 10,000 events per call (botocore's logs model).
_BATCH = 10_000
# logging's default asctime: `2026-12-01 23:29:47,123`.
_ASCTIME = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})")


def publish(
    logs,
    job_name: str,
    created: datetime,
    log_path: Path,
    on_clock: Callable[[float], float] = lambda real_seconds: real_seconds,
) -> None:
    """Put the job's log lines into moto's CloudWatch Logs (`logs`: a boto3 client inside mock_aws);
    `on_clock`: a real moment (epoch seconds) on the emulator's clock, which stamps `created` too."""
    lines = log_path.read_text(errors="replace").splitlines() if log_path.exists() else []
    stream = f"{job_name}/algo-1-{int(created.timestamp())}"
    try:
        logs.create_log_group(logGroupName=TRAINING_LOG_GROUP)
    except logs.exceptions.ResourceAlreadyExistsException:
        pass
    logs.create_log_stream(logGroupName=TRAINING_LOG_GROUP, logStreamName=stream)
    events, stamp = [], int(created.timestamp() * 1000)
    for line in filter(None, lines):
        logged = _ASCTIME.search(line[:80])
        written = datetime.strptime(logged.group(1), "%Y-%m-%d %H:%M:%S,%f").astimezone() if logged else None
        stamp = max(stamp + 1, int(on_clock(written.timestamp()) * 1000)) if written else stamp + 1
        events.append({"timestamp": stamp, "message": line})
    for start in range(0, len(events), _BATCH):
        logs.put_log_events(
            logGroupName=TRAINING_LOG_GROUP, logStreamName=stream, logEvents=events[start : start + _BATCH]
        )
