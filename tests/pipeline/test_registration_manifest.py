"""The registration's manifests (docs/registry.md, step 0) when the listing fails: the run ends
`RegistrationFailed` naming S3's error, before any evaluation job, and no version is created."""

from __future__ import annotations

import boto3

from tests.pipeline.conftest import REGISTRY_GROUP


def test_a_listing_that_fails_ends_the_registration_with_a_named_error_before_any_evaluation(
    registry, monkeypatch
):
    from moto.s3.exceptions import S3AccessDeniedError
    from moto.s3.responses import S3Response

    run = registry()

    def denied(self):
        raise S3AccessDeniedError()

    monkeypatch.setattr(S3Response, "list_objects_v2", denied)
    outcome = run("trainstack-denied", 2.0)

    assert (outcome.status, outcome.error) == ("FAILED", "RegistrationFailed"), outcome.cause
    assert "failed: s3.AccessDeniedException: Access Denied" in outcome.cause, outcome.cause
    assert "no version was created" in outcome.cause
    assert not [name for name in run.sm.fake.jobs if name.endswith("-eval")]
    listed = boto3.client("sagemaker").list_model_packages(ModelPackageGroupName=REGISTRY_GROUP)
    assert listed["ModelPackageSummaryList"] == []
