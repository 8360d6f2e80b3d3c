"""DynamoDB item writes one at a time, as AWS applies them.

moto's DynamoDB backend (moto/dynamodb/models/__init__.py) reads an item, checks the request's condition
and writes the result with no lock, while the emulator runs every execution in a thread of its own: two
executions updating one item at once (the team budget's `ADD runs :one` under a condition, a lease taken
over) could both pass the condition on the same old item, and one write was lost (a loaded machine showed
a budget that never counted its fourth run, and a released count of -1). DynamoDB applies each write to an
item whole: "a conditional write succeeds only if the item attributes meet one or more expected
conditions", and an atomic counter is "incremented, unconditionally, without interfering with other write
requests" (Amazon DynamoDB Developer Guide, "Condition expressions" and "Atomic counters"). Here every
write request, and each read that could meet one half done, runs under one lock per backend.
"""

from __future__ import annotations

import functools
import threading
from typing import Any
from unittest import mock

OPERATIONS = (
    "put_item",
    "update_item",
    "delete_item",
    "transact_write_items",
    "batch_write_item",
    "get_item",
    "query",
    "scan",
)


def patches() -> list[Any]:
    from moto.dynamodb.models import DynamoDBBackend

    lock = threading.RLock()  # one for all backends: a transaction spans one Region's tables only anyway

    def one_at_a_time(operation):
        @functools.wraps(operation)
        def locked(*arguments: Any, **named: Any) -> Any:
            with lock:
                return operation(*arguments, **named)

        return locked

    return [
        mock.patch.object(DynamoDBBackend, name, one_at_a_time(getattr(DynamoDBBackend, name)))
        for name in OPERATIONS
    ]
