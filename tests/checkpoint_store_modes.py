"""The checkpoint stores the per-store checks cover (issue 41), and the config of each: every profile of
config/default.yaml on the store, in each governance mode (compliance none, and control-tower with its
boundary, role path and qualifier).

To cover another store, add its line to STORES: the store and what its config needs beside
`checkpoint_store` (s3-express: an availability_zone_id; fsx: a PERSISTENT_2 file system). The checks
parametrize over STORE_MODES: the simulated IAM calls and the Service Authorization Reference
(tests/iam), the request guard and the pipeline's request (tests/pipeline), the Control Tower rules
(tests/infra). Request shapes per store are tests/domain/test_checkpoint_store_requests.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.conftest import deep_merge
from tests.infra.test_governed import GOVERNED

# store -> the config it needs beside the profiles' checkpoint_store.
STORES: dict[str, dict[str, Any]] = {
    "sagemaker-sync": {},
    "s3-direct": {},
    # S3 names a directory bucket's zone by AZ id (trainstack/express_buckets.py).
    "s3-express": {"availability_zone": None, "availability_zone_id": "use1-az4"},
    # config/default.yaml has FSx enabled; its sizing picks the deployment type, both of which export.
    "fsx": {},
}
GOVERNANCE: dict[str, dict[str, Any]] = {"none": {}, "control-tower": GOVERNED}


def with_store(data: dict[str, Any], store: str) -> dict[str, Any]:
    """`data` with every profile on `store`."""
    data = deep_merge(data, STORES[store])
    return {**data, "profiles": [{**profile, "checkpoint_store": store} for profile in data["profiles"]]}


def _mode(store: str, governance: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda data: with_store(deep_merge(data, GOVERNANCE[governance]), store)


# `store-<store>-<governance>` -> the config data of that mode, from config/default.yaml's.
STORE_MODES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    f"store-{store}-{governance}": _mode(store, governance) for store in STORES for governance in GOVERNANCE
}
