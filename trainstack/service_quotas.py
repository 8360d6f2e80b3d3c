"""The account's SageMaker training quotas, read with Service Quotas, against a profile's instance counts:
the warning `trainstack plan --profile` and `trainstack start` print (stderr) before SageMaker refuses.

ListServiceQuotas (ServiceCode `sagemaker`; botocore's service-quotas model) lists the quotas applied to
the account, each with its QuotaName (`ml.p5.48xlarge for training job usage`, the name SageMaker's
refusal quotes: trainstack.quota) and Value. GetServiceQuota needs the QuotaCode, which only a listing
gives, so one paginated listing reads them all. Where the caller may not (AccessDenied), Service Quotas
answers another error or no credentials are found, one line says so and nothing is checked.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from trainstack.profiles import Profile
from trainstack.quota import SERVICE_CODE, quota_name

LIST_ACTION = "servicequotas:ListServiceQuotas"
# A check that only warns: it must not hold the command up where the endpoint cannot be reached.
QUICK = Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 2})


def service_quotas_client(region: str) -> Any:
    return boto3.client("service-quotas", region_name=region, config=QUICK)


class QuotasUnreadable(Exception):
    """Service Quotas could not be read: one line saying why."""


def training_quotas(service_quotas: Any) -> dict[str, float]:
    """QuotaName -> Value of the account's applied SageMaker quotas."""
    quotas: dict[str, float] = {}
    try:
        for page in service_quotas.get_paginator("list_service_quotas").paginate(ServiceCode=SERVICE_CODE):
            quotas.update({quota["QuotaName"]: quota["Value"] for quota in page.get("Quotas", [])})
    except ClientError as error:
        code = error.response["Error"]["Code"]
        if code == "AccessDeniedException":
            raise QuotasUnreadable(
                f"quotas not checked: this caller may not call {LIST_ACTION} (AccessDenied)"
            ) from None
        raise QuotasUnreadable(f"quotas not checked: Service Quotas answered {code}") from None
    except BotoCoreError as error:
        raise QuotasUnreadable(f"quotas not checked: Service Quotas could not be read ({error})") from None
    return quotas


def above_quota(
    profile: Profile, quotas: dict[str, float], instance_count: int | None = None
) -> Iterable[str]:
    """One warning per instance preference whose count (or the run's `instance_count`) is above its
    type's quota; SageMaker checks every preference's quota and refuses the request if any falls short."""
    for index, preference in enumerate(profile.instance_preferences):
        name = quota_name(preference.instance_type, spot=profile.managed_spot)
        count = instance_count or preference.instance_count
        if name in quotas and count > quotas[name]:
            yield (
                f"quota: profile {profile.name} instance_preferences.{index} asks for {count} "
                f"{preference.instance_type}, above the account's quota '{name}' of {quotas[name]:g}: "
                "SageMaker refuses it (the pipeline tries the other preferences, else fails with "
                "QuotaExceeded); request a higher quota in Service Quotas"
            )


def quota_lines(service_quotas: Any, profile: Profile, instance_count: int | None = None) -> list[str]:
    """What plan and start print: the warnings, or the one line saying why quotas were not checked."""
    try:
        quotas = training_quotas(service_quotas)
    except QuotasUnreadable as unreadable:
        return [str(unreadable)]
    return list(above_quota(profile, quotas, instance_count))
