"""The demo's CloudWatch Logs: each local job's log, as SageMaker delivers a training job's output.

SageMaker writes a job's stdout/stderr to log group `/aws/sagemaker/TrainingJobs`, one stream per host
named `<job>/algo-<N>-<epoch seconds>` (SageMaker developer guide, "Log Amazon SageMaker Events with
Amazon CloudWatch"; `trainstack logs` reads them by the `<job>/` prefix). Assumed here: every line is
stamped with the time the job ended plus its line number in milliseconds (SageMaker stamps each line
when the agent reads it), so lines keep their order and the report reads the same text as on AWS.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from unittest import mock

from trainstack.runs import TRAINING_LOG_GROUP

# PutLogEvents accepts at most 10,000 events per call (botocore's logs model).
_BATCH = 10_000


def publish(logs, job_name: str, created: datetime, log_path: Path, ended: datetime) -> None:
    """Put the job's log lines into moto's CloudWatch Logs (`logs`: a boto3 client inside mock_aws)."""
    lines = log_path.read_text(errors="replace").splitlines() if log_path.exists() else []
    stream = f"{job_name}/algo-1-{int(created.timestamp())}"
    try:
        logs.create_log_group(logGroupName=TRAINING_LOG_GROUP)
    except logs.exceptions.ResourceAlreadyExistsException:
        pass
    logs.create_log_stream(logGroupName=TRAINING_LOG_GROUP, logStreamName=stream)
    first = int(ended.timestamp() * 1000)
    events = [{"timestamp": first + index, "message": line} for index, line in enumerate(lines) if line]
    for start in range(0, len(events), _BATCH):
        logs.put_log_events(
            logGroupName=TRAINING_LOG_GROUP, logStreamName=stream, logEvents=events[start : start + _BATCH]
        )


@contextmanager
def stream_prefix_filter() -> Iterator[None]:
    """moto's FilterLogEvents ignores logStreamNamePrefix and returns every stream's events; AWS returns
    only those of streams whose names start with it (botocore's logs model: "Filters the results to
    include only events from log streams that have names starting with this prefix"). Corrected here so
    that a job's log holds only that job's lines."""
    from moto.logs.responses import LogsResponse

    original = LogsResponse.filter_log_events

    def filter_log_events(self: LogsResponse) -> str:
        prefix = self._get_param("logStreamNamePrefix")
        if prefix and not self._get_param("logStreamNames"):
            group = self.logs_backend.groups.get(self._get_param("logGroupName"))
            # No stream has the prefix: a name that cannot exist, as moto reads an empty list as "all".
            names = [name for name in (group.streams if group else {}) if name.startswith(prefix)] or [prefix]
            read = self._get_param
            self._get_param = lambda name, if_none=None: (
                names if name == "logStreamNames" else read(name, if_none)
            )
        return original(self)

    with mock.patch.object(LogsResponse, "filter_log_events", filter_log_events):
        yield
