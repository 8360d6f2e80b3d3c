"""The dataset manifest of a 1,000,000-object prefix at full size in the local emulator: synthetic
ListObjectsV2 pages (localaws/emulator/synthetic_listing.py), the real fragment and child machine
(tests/pipeline/manifest_machines.py), Step Functions' 25,000-event history enforced. Prints the time, the
pages a second, each execution's history events against the limit, and whether the manifest equals
trainstack.manifest's reference. The suite runs the same scenario scaled down
(tests/pipeline/test_dataset_manifest.py); this is the full size (minutes: docs/emulator.md).

    PYTHONPATH=. .venv/bin/python benchmarks/manifest_scale.py [--objects 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import pytest
from moto import mock_aws

from localaws.emulator import VirtualClock, limits, local_stepfunctions
from localaws.emulator.synthetic_listing import SyntheticPrefix, install_synthetic_listing
from tests.pipeline import harness
from tests.pipeline.manifest_machines import CALLER, create, listing_histories, manifest_definitions
from trainstack.manifest import manifest_of

BUCKET = "trainstack-datasets-bench"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=1_000_000)
    objects = parser.parse_args().objects
    os.environ.update(AWS_DEFAULT_REGION=harness.REGION, AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="x")
    prefix = SyntheticPrefix(BUCKET, "datasets/big/", objects)
    definitions = manifest_definitions(BUCKET)
    with (
        pytest.MonkeyPatch.context() as patches,
        mock_aws(config={"stepfunctions": {"execute_state_machine": True}}),
        local_stepfunctions(VirtualClock()),
    ):
        import boto3

        boto3.client("s3", region_name=harness.REGION).create_bucket(Bucket=BUCKET)
        caller = create(definitions)[CALLER]
        answered = install_synthetic_listing(prefix, patches)
        started = time.perf_counter()
        outcome = harness.wait_for(harness.start(caller, {"prefix": prefix.prefix}, "bench"), timeout=7200)
        seconds = time.perf_counter() - started
        children = listing_histories()
    reference = manifest_of(prefix.entries()).as_dict()
    print(
        json.dumps(
            {
                "objects": objects,
                "status": outcome.status,
                "manifest_equals_reference": (outcome.output or {}).get("manifest") == reference,
                "pages": len(answered),
                "seconds": round(seconds, 1),
                "pages_per_second": round(len(answered) / seconds, 2),
                "history_limit": limits.HISTORY_EVENT_LIMIT,
                "caller_events": len(outcome.history),
                "child_events": children,
            }
        )
    )


if __name__ == "__main__":
    main()
