"""`trainstack plan --profile` reads the account's quotas (trainstack.service_quotas): here from moto
with the ListServiceQuotas localaws.emulator adds (no quota applied), so that no test reaches for AWS."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def offline_service_quotas(monkeypatch):
    from moto import mock_aws

    import localaws.emulator  # noqa: F401  (adds ListServiceQuotas to moto)

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield
