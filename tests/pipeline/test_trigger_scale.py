"""The retrain trigger and a prefix past the dataset manifest's bound (stacks/pipeline/manifest_listing.py):
the window ends in the named decision `DatasetTooLarge`, not retried, the profile is released, nothing
trains. The bound
is lowered (2 executions of 2 pages: 800 objects) so that the listing takes seconds; the states and the
decision are the same at 300,000,000 objects. The prefix is served by synthetic ListObjectsV2 pages."""

from __future__ import annotations

import json

import boto3
import pytest

from localaws.demo.trigger_world import trigger_world
from localaws.emulator.synthetic_listing import SyntheticPrefix, install_synthetic_listing
from localaws.sagemaker import evaluated, scripted_sagemaker
from stacks.pipeline import manifest_listing
from tests.pipeline.conftest import FAKE_VALUES
from tests.pipeline.trigger_machines import PREFIX, PROFILE, trigger_machines, trigger_templates
from trainstack.manifest import PAGE_SIZE

PAGES, EXECUTIONS = 2, 2
BOUND = PAGES * EXECUTIONS * PAGE_SIZE


@pytest.fixture(scope="module")
def templates(pipeline):
    with pytest.MonkeyPatch.context() as lowered:
        lowered.setattr(manifest_listing, "PAGES_PER_EXECUTION", PAGES)
        lowered.setattr(manifest_listing, "MAX_EXECUTIONS", EXECUTIONS)
        return trigger_templates(pipeline.settings)


def test_a_prefix_past_the_bound_ends_in_dataset_too_large_and_frees_the_profile(
    templates, pipeline, monkeypatch
):
    machines = trigger_machines(templates["no-fsx"], pipeline)
    sagemaker = scripted_sagemaker(None, evaluation_script=evaluated(2.0))
    with trigger_world(machines, sagemaker, None, monkeypatch) as world:
        install_synthetic_listing(
            SyntheticPrefix(FAKE_VALUES["DatasetBucket"], PREFIX, BOUND + 1), monkeypatch
        )
        world.upload(f"{PREFIX}shard-000.bin")
        world.run_until_idle()

        failed = [item for item in world.triggers() if item["status"] == "FAILED"]
        # Not retried (failed_window_retries is 1): a retry would list the whole prefix again to fail.
        assert [item["error"] for item in failed] == ["DatasetTooLarge"]
        assert f"holds more than {BOUND} objects" in failed[0]["cause"]
        item = world.item()[PROFILE]
        assert "controller" not in item and "firstEventMillis" not in item and "failedWindows" not in item
        last = json.loads(item["lastDecision"]["S"])
        assert last["decision"] == "failed" and last["message"].startswith("DatasetTooLarge: s3://")
        assert last["message"].endswith("split it into several prefixes.")
        assert world.runs() == []
        # The lease renewed before each child listing: 5 events each, 13 a child with its listing's 8.
        events = boto3.client("stepfunctions").get_execution_history(
            executionArn=failed[0]["executionArn"], maxResults=1000
        )["events"]
        renewals = [
            event for event in events if event.get("stateEnteredEventDetails", {}).get("name") == "RenewLease"
        ]
        assert len(renewals) == EXECUTIONS


def test_a_lease_lost_during_a_long_listing_ends_the_window_before_any_run(templates, pipeline, monkeypatch):
    """The lease is renewed before each child listing. Here another execution holds the profile by the time
    the second child starts (as after a listing longer than the lease): the renewal's condition fails, the
    execution ends `TriggerStateFailed` and trains nothing, and the other execution's hold stays."""
    from moto.s3.responses import S3Response

    machines = trigger_machines(templates["no-fsx"], pipeline)
    sagemaker = scripted_sagemaker(None, evaluation_script=evaluated(2.0))
    with trigger_world(machines, sagemaker, None, monkeypatch) as world:
        answered = install_synthetic_listing(
            SyntheticPrefix(FAKE_VALUES["DatasetBucket"], PREFIX, PAGES * PAGE_SIZE + 1), monkeypatch
        )
        listed = S3Response.list_objects_v2

        def taken_over_at_the_first_childs_last_page(self):
            response = listed(self)
            if answered[-1] == (PAGES - 1) * PAGE_SIZE:
                boto3.client("dynamodb").update_item(
                    TableName=machines.table,
                    Key={"profile": {"S": PROFILE}},
                    UpdateExpression="SET controller = :other",
                    ExpressionAttributeValues={":other": {"S": "another-execution"}},
                )
            return response

        monkeypatch.setattr(S3Response, "list_objects_v2", taken_over_at_the_first_childs_last_page)
        world.upload(f"{PREFIX}shard-000.bin")
        world.run_until_idle()

        (failed,) = [item for item in world.triggers() if item["status"] == "FAILED"]
        assert failed["error"] == "TriggerStateFailed"
        assert "Could not renew the lease on the profile" in failed["cause"]
        assert world.runs() == []
        assert world.item()[PROFILE]["controller"] == {"S": "another-execution"}
        assert answered == [0, PAGE_SIZE], "the second child never started"
