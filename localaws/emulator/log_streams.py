"""FilterLogEvents' `logStreamNamePrefix`, which moto's CloudWatch Logs ignores (it answers every stream of
the group): "Filters the results to include only events from log streams that have names starting with this
prefix"; given with `logStreamNames` too, the call fails with InvalidParameterException (CloudWatch Logs API
reference, FilterLogEvents). A team's run reader reads one job's streams, `<job>/...`, by it."""

from __future__ import annotations

import json
from typing import Any
from unittest import mock


def patches() -> list[Any]:
    from moto.logs.responses import LogsResponse

    return [mock.patch.object(LogsResponse, "filter_log_events", _filtered(LogsResponse.filter_log_events))]


def _filtered(filter_log_events):
    def by_prefix(self) -> Any:
        prefix = self._get_param("logStreamNamePrefix")
        group = self.logs_backend.groups.get(self._get_param("logGroupName"))
        if prefix is None or group is None:  # moto's own answer (a missing group: ResourceNotFoundException)
            return filter_log_events(self)
        from moto.logs.exceptions import InvalidParameterException

        if self._get_param("logStreamNames"):
            raise InvalidParameterException("Cannot specify both logStreamNames and logStreamNamePrefix")
        names = [name for name in group.streams if name.startswith(prefix)]
        if not names:
            return json.dumps({"events": [], "searchedLogStreams": []})
        self._get_param = _with_stream_names(self._get_param, names)
        return filter_log_events(self)

    return by_prefix


def _with_stream_names(get_param, names: list[str]):
    def get(name: str, *args: Any, **kwargs: Any) -> Any:
        return names if name == "logStreamNames" else get_param(name, *args, **kwargs)

    return get
