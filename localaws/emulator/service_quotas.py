"""ListServiceQuotas for moto, which implements only ListAWSDefaultServiceQuotas and GetServiceQuota of
Service Quotas, so that `trainstack plan` and `start` read quotas here as they do from AWS.

Behaviour, from botocore's service-quotas model (ListServiceQuotas): it "lists the applied quota values
for the specified Amazon Web Services service ... If the applied quota value is not available for a quota,
the quota is not retrieved", so an account whose quotas nobody applied answers an empty list: that is the
emulator's default. `apply_quota` records an applied value (ServiceQuota's QuotaName, QuotaCode and Value
members) for one account and region; moto makes a new backend, and so an empty list, for every mock.
One page holds every quota (the model's NextToken is never set: assumed harmless, the product pages).
"""

from __future__ import annotations

import json

from moto.servicequotas.models import servicequotas_backends
from moto.servicequotas.responses import ServiceQuotasResponse

APPLIED = "_localaws_applied_quotas"


def apply_quota(
    account_id: str, region: str, service_code: str, quota_code: str, quota_name: str, value: float
) -> None:
    """Record `value` as the applied quota `quota_name` of `service_code` in this account and region."""
    backend = servicequotas_backends[account_id][region]
    quotas = backend.__dict__.setdefault(APPLIED, [])
    quotas.append(
        {
            "ServiceCode": service_code,
            "QuotaCode": quota_code,
            "QuotaName": quota_name,
            "Value": value,
            "QuotaArn": f"arn:aws:servicequotas:{region}:{account_id}:{service_code}/{quota_code}",
            "Adjustable": True,
            "GlobalQuota": False,
        }
    )


def _list_service_quotas(self: ServiceQuotasResponse) -> str:
    service_code = json.loads(self.body or "{}").get("ServiceCode")
    applied = self.backend.__dict__.get(APPLIED, [])
    return json.dumps({"Quotas": [quota for quota in applied if quota["ServiceCode"] == service_code]})


# moto dispatches a JSON-protocol action to the response method of the same name, where one exists.
ServiceQuotasResponse.list_service_quotas = _list_service_quotas  # type: ignore[attr-defined]
