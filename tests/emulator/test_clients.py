"""localaws.clients: one client per service and Region within a mock, new ones for the next mock."""

from __future__ import annotations

from moto import mock_aws

from localaws import clients


def test_a_mock_shares_its_clients_and_the_next_mock_gets_its_own(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        s3 = clients.client("s3")
        assert clients.client("s3") is s3 is clients.client("s3", "us-east-1")
        assert clients.client("s3", "eu-west-1") is not s3
        assert clients.client("s3", "eu-west-1").meta.region_name == "eu-west-1"
        s3.create_bucket(Bucket="first-mock")
    with mock_aws():
        again = clients.client("s3")
        assert again is not s3
        assert again.list_buckets()["Buckets"] == []  # the new mock's empty account, through the new client
