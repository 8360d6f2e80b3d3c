"""The gate fails closed (issue 39; docs/registry.md, steps 4-8): the baseline is the best comparable
Approved version, found over every page; a baseline it cannot read or compare leaves the version pending; two
registrations of one group take turns; a retried create makes one version; a permanent failure ends
RegistrationFailed. Each on the synthesized machines, in the emulator, on the virtual clock."""

from __future__ import annotations

import boto3

from localaws.sagemaker import evaluated
from tests.pipeline import harness
from tests.pipeline.conftest import FAKE_VALUES, REGISTRY_GROUP, REGISTRY_PROFILE
from tests.pipeline.test_registry import (
    REGISTRATION_OPERATIONS,
    assert_requests_match_the_service_model,
    versions,
)
from trainstack.registry import LEASE_SECONDS, LINEAGE_KEYS


def decisions(*outcomes) -> list[str]:
    return [outcome.output["modelPackage"]["decision"] for outcome in outcomes]


def test_an_empty_first_page_with_a_next_token_is_no_first_version(registry):
    run = registry()
    first, second = run("trainstack-p1", 2.0), run("trainstack-p2", 2.6)
    assert decisions(first, second) == ["Approved", "Rejected"]
    # SageMaker reads one version per page, then filters: the newest (Rejected) page comes back empty.
    run.sm.fake.registry.scanned_per_page = 1
    worse = run("trainstack-p3", 2.5)
    package = worse.output["modelPackage"]
    assert package["decision"] == "Rejected", package
    assert package["baseline"]["version"] == 1
    assert [v["ModelApprovalStatus"] for v in versions()] == ["Approved", "Rejected", "Rejected"]


def test_a_baseline_without_its_evaluation_loss_leaves_the_version_pending_saying_why(registry):
    run = registry()
    first = run("trainstack-u1", 2.0)
    boto3.client("sagemaker").update_model_package(
        ModelPackageArn=first.output["modelPackage"]["modelPackageArn"],
        ModelApprovalStatus="Approved",
        CustomerMetadataPropertiesToRemove=[LINEAGE_KEYS["loss"]],
    )
    package = run("trainstack-u2", 1.0).output["modelPackage"]
    assert package["decision"] == "PendingManualApproval"
    assert package["reason"] == (
        "pending, Approved version 1 records no evaluation loss to compare with; evaluation loss 1.0000"
    )
    assert versions()[1]["ApprovalDescription"] == package["reason"]


def test_the_tolerance_is_absolute_and_the_boundary_approves(registry):
    run = registry()  # loss_tolerance 0.01
    assert decisions(run("trainstack-b1", 2.0)) == ["Approved"]
    at_the_boundary, just_above = run("trainstack-b2", 2.01), run("trainstack-b3", 2.0101)
    assert decisions(at_the_boundary, just_above) == ["Approved", "Rejected"]
    assert just_above.output["modelPackage"]["reason"] == (
        "rejected, worse than the best approved model: evaluation loss 2.0101 vs 2.0000 of Approved "
        "version 1, the best comparable (tolerance 0.01, absolute)"
    )


def test_versions_each_within_the_tolerance_of_the_last_do_not_drift_from_the_best(registry):
    run = registry()
    outcomes = [run(f"trainstack-d{i}", loss) for i, loss in enumerate((2.000, 2.008, 2.016))]
    assert decisions(*outcomes) == ["Approved", "Approved", "Rejected"]
    assert outcomes[2].output["modelPackage"]["baseline"]["version"] == 1


def test_a_version_evaluated_on_another_evaluation_set_is_pending_naming_the_difference(registry):
    run = registry()
    assert decisions(run("trainstack-e1", 2.0)) == ["Approved"]
    key = "evaluation/small/eval-001.bin"  # the evaluation set grew: another manifest
    boto3.client("s3").put_object(Bucket=FAKE_VALUES["DatasetBucket"], Key=key, Body=b"more")
    package = run("trainstack-e2", 1.5).output["modelPackage"]
    assert package["decision"] == "PendingManualApproval"
    assert package["reason"].startswith(
        "pending, not comparable with the newest Approved version 1: evaluation set manifest "
    )
    assert "max_eval_tokens" not in package["reason"] and "seq_len" not in package["reason"]
    assert package["baseline"] is None


def test_a_create_whose_answer_was_lost_makes_one_version_when_retried(registry):
    run = registry()
    run.sm.fake.registry.lost_creates = 1
    outcome = run("trainstack-i1", 2.0)
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert outcome.output["modelPackage"]["version"] == 1
    assert [v["ModelApprovalStatus"] for v in versions()] == ["Approved"]
    # A first version: no Approved version to describe.
    assert_requests_match_the_service_model(
        run.sm.registration_arn, REGISTRATION_OPERATIONS - {"DescribeModelPackage"}
    )


def test_a_permanent_registration_failure_ends_registration_failed_with_its_cause(registry):
    run = registry()
    run.sm.fake.registry.refuse_creates = ("ValidationException", "The request is not valid.")
    outcome = run("trainstack-x1", 2.0)
    assert (outcome.status, outcome.error) == ("FAILED", "RegistrationFailed")
    assert outcome.cause.startswith(
        f"Registration of run trainstack-x1 in group {REGISTRY_GROUP} failed: SageMaker.SageMakerException: "
    )
    assert "The request is not valid." in outcome.cause
    assert "no version was created. The model stays at s3://trainstack-artifacts-test/trainstack-x1/" in (
        outcome.cause
    )
    # The lease was given back: a later run of the group registers.
    run.sm.fake.registry.refuse_creates = None
    assert decisions(run("trainstack-x2", 2.0)) == ["Approved"]


def lease_waited(registration_arn: str) -> bool:
    """Whether a registration has waited for its group's lease."""
    return any(
        event["stateEnteredEventDetails"]["name"] == "WaitForGroupLease"
        for execution in boto3.client("stepfunctions").list_executions(stateMachineArn=registration_arn)[
            "executions"
        ]
        for event in boto3.client("stepfunctions").get_execution_history(
            executionArn=execution["executionArn"], maxResults=1000
        )["events"]
        if event["type"] == "WaitStateEntered"
    )


# The lease of the test below outlasts any real time the test may take: on the virtual clock each of the
# second registration's 30 s waits returns at once, so on a slow machine an hour's lease (LEASE_SECONDS)
# can run out while the first one's create is held, and the second would take the lease over, as it
# should once a holder has gone. That takeover is not what this test is about.
HELD_LEASE = {f"$millis() + {LEASE_SECONDS * 1000}": f"$millis() + {100 * 365 * 86400 * 1000}"}


def test_two_runs_registering_at_once_are_decided_one_after_the_other(registry):
    run = registry(HELD_LEASE)
    assert decisions(run("trainstack-c0", 2.0)) == ["Approved"]
    sm = run.sm
    sm.fake.behaviour.script_evaluations(evaluated(1.98), evaluated(1.99))
    control = sm.fake.control
    control.hold("CreateModelPackage")  # the first to create waits there, inside its lease if it has one
    started = [
        harness.start(sm.pipeline_arn, {"profile": REGISTRY_PROFILE, "runName": name}, name)
        for name in ("trainstack-c1", "trainstack-c2")
    ]
    harness.wait_until(
        lambda: (
            control.waiting["CreateModelPackage"] == 2
            or (control.waiting["CreateModelPackage"] == 1 and lease_waited(sm.registration_arn))
        )
    )
    control.release_gate("CreateModelPackage")
    outcomes = [harness.wait_for(arn) for arn in started]
    assert all(outcome.status == "SUCCEEDED" for outcome in outcomes), [o.cause for o in outcomes]
    # One decided against version 1, the other against the first one's version 2 (better than version 1).
    assert sorted(outcome.output["modelPackage"]["baseline"]["version"] for outcome in outcomes) == [1, 2]
    assert decisions(*outcomes) == ["Approved", "Approved"]
    assert boto3.client("dynamodb").scan(TableName="trainstack-registration-leases")["Items"] == []
