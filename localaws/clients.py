"""`client(service)`: one boto3 client per service and Region for the default session in use, where the
emulated world's setup and polling made a new client for every call (thousands per test run: each takes
milliseconds to build its class, endpoint and event hooks).

Keyed by the default session object, so a new session (moto replaces boto3's default session whenever a
mock starts) gets new clients and never one bound to an earlier mock's credentials. Low-level clients are
thread safe once created (boto3's guide, "Multithreading and multiprocessing"); creating them is not, so
creation holds a lock."""

from __future__ import annotations

import threading
import weakref
from typing import Any

import boto3

_lock = threading.Lock()
_clients: weakref.WeakKeyDictionary[boto3.Session, dict[tuple[str, str | None], Any]] = (
    weakref.WeakKeyDictionary()
)


def client(service: str, region: str | None = None) -> Any:
    """boto3.client(service, region_name=region), made once per default session (None: the session's
    Region, as boto3.client resolves it)."""
    with _lock:
        session = boto3._get_default_session()  # what boto3.client itself uses
        key = (service, region or session.region_name)
        made = _clients.setdefault(session, {})
        if key not in made:
            made[key] = session.client(service, region_name=key[1])
        return made[key]
