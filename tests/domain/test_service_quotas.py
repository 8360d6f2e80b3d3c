"""trainstack.service_quotas: a profile's instance counts against the account's quotas, read with
ListServiceQuotas; requests and answers checked against botocore's service-quotas model (Stubber)."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from localaws.emulator import apply_quota
from tests.aws_fixtures import ACCOUNT, REGION, SUCCEEDS, state_machine
from trainstack.cli import main as trainstack
from trainstack.config_loading import load_settings
from trainstack.service_quotas import LIST_ACTION, quota_lines

PROFILE = "llama-7b-smp"  # 2 x ml.p5.48xlarge, else 2 x ml.p4de.24xlarge


def quota(name: str, value: float) -> dict:
    return {
        "ServiceCode": "sagemaker",
        "QuotaName": name,
        "QuotaCode": "L-1234ABCD",
        "Value": value,
        "Unit": "None",
        "Adjustable": True,
        "GlobalQuota": False,
    }


@pytest.fixture
def profile(aws):
    settings = load_settings(None)
    return next(p for p in settings.profiles if p.name == PROFILE)


def stubbed(*pages) -> tuple[object, Stubber]:
    client = boto3.client("service-quotas", region_name=REGION)
    stubber = Stubber(client)
    for index, page in enumerate(pages):
        expected = {"ServiceCode": "sagemaker"} | ({"NextToken": str(index)} if index else {})
        answer = {"Quotas": page} | ({"NextToken": str(index + 1)} if index + 1 < len(pages) else {})
        stubber.add_response("list_service_quotas", answer, expected)
    stubber.activate()
    return client, stubber


def test_a_preference_above_its_quota_is_named_with_the_quota(profile):
    client, stubber = stubbed(
        [quota("ml.p5.48xlarge for training job usage", 1)],
        [
            quota("ml.p4de.24xlarge for training job usage", 4),
            quota("ml.p5.48xlarge for spot training job usage", 0),
        ],
    )
    assert quota_lines(client, profile) == [
        "quota: profile llama-7b-smp instance_preferences.0 asks for 2 ml.p5.48xlarge, above the account's "
        "quota 'ml.p5.48xlarge for training job usage' of 1: SageMaker refuses it (the pipeline tries the "
        "other preferences, else fails with QuotaExceeded); request a higher quota in Service Quotas"
    ]
    stubber.assert_no_pending_responses()


def test_the_runs_instance_count_is_what_is_checked(profile):
    client, _ = stubbed([quota("ml.p5.48xlarge for training job usage", 8)])
    assert quota_lines(client, profile, instance_count=4) == []
    client, _ = stubbed([quota("ml.p5.48xlarge for training job usage", 8)])
    assert len(quota_lines(client, profile, instance_count=16)) == 1


def test_a_caller_that_may_not_read_quotas_is_told_in_one_line(profile):
    client = boto3.client("service-quotas", region_name=REGION)
    stubber = Stubber(client)
    stubber.add_client_error("list_service_quotas", "AccessDeniedException", "User is not authorized")
    stubber.activate()
    assert quota_lines(client, profile) == [
        f"quotas not checked: this caller may not call {LIST_ACTION} (AccessDenied)"
    ]


def test_start_and_plan_read_the_accounts_quotas_through_the_api(aws, capsys):
    """The CLI's own client, through moto's Service Quotas with ListServiceQuotas (localaws.emulator):
    no quota applied says nothing; a p5 quota of 1 against the profile's 2 is named in one line."""
    assert trainstack(["plan", "--profile", PROFILE]) == 0
    assert "quota" not in capsys.readouterr().err
    apply_quota(ACCOUNT, REGION, "sagemaker", "L-1234ABCD", "ml.p5.48xlarge for training job usage", 1)
    assert trainstack(["plan", "--profile", PROFILE]) == 0
    said = capsys.readouterr().err.splitlines()[-1]
    assert said.startswith("quota: profile llama-7b-smp instance_preferences.0 asks for 2 ml.p5.48xlarge, ")
    assert trainstack(["start", "--state-machine-arn", state_machine(SUCCEEDS)]) == 0
    assert capsys.readouterr().err.splitlines()[-1] == said
