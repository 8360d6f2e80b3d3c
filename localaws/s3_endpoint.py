"""A local S3 endpoint (moto's ThreadedMotoServer, with directory buckets' CreateSession:
localaws/s3_express.py) that s3torchconnector's client talks to over HTTP.

The training processes and the benchmark read and write it as they would S3: s3torchconnector's client
(AWS's CRT) reads `AWS_ENDPOINT_URL` (the SDKs' standard variable), and training_scripts/checkpoint_storage.py
then addresses it path-style. moto's server keeps every bucket in this process's memory and serves
ranged GETs (206), which DCP's shard reads use.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

import boto3

from localaws.s3_express import ExpressMotoServer

logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise

REGION = "us-east-1"
# moto accepts any credentials; the CRT client signs with whatever the environment holds.
ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": REGION,
    "AWS_DEFAULT_REGION": REGION,
}


@contextlib.contextmanager
def local_s3(*buckets: str, sessions: list[str | None] | None = None) -> Iterator[dict[str, str]]:
    """Serve S3 on a free local port with `buckets` created (directory buckets too: localaws/s3_express.py);
    yields the environment that points clients (boto3, s3torchconnector, train.py's subprocesses) at it.
    `sessions`, if given, receives the bucket of each CreateSession (None: unnamed)."""
    server = ExpressMotoServer(ip_address="127.0.0.1", port=0)
    if sessions is not None:
        server.express.sessions = sessions
    server.start()
    try:
        host, port = server.get_host_and_port()
        environment = {**ENVIRONMENT, "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
        client = s3_client(environment)
        for bucket in buckets:
            create_bucket(client, bucket, REGION)
        yield environment
    finally:
        server.stop()


def create_bucket(client, bucket: str, region: str) -> None:
    """CreateBucket in `region` as AWS requires it: us-east-1 takes no location constraint, any other Region
    must be named in CreateBucketConfiguration.LocationConstraint, else S3 (and moto) answer
    IllegalLocationConstraintException (Amazon S3 API Reference, CreateBucket and CreateBucketConfiguration:
    "If you don't specify a Region, the bucket is created in the US East (N. Virginia) Region")."""
    if region == "us-east-1":
        client.create_bucket(Bucket=bucket)
    else:
        client.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": region})


def s3_client(environment: dict[str, str]):
    return boto3.client(
        "s3",
        endpoint_url=environment["AWS_ENDPOINT_URL"],
        region_name=environment["AWS_REGION"],
        aws_access_key_id=environment["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=environment["AWS_SECRET_ACCESS_KEY"],
    )


@contextlib.contextmanager
def environment_of(values: dict[str, str]) -> Iterator[None]:
    """os.environ with `values` set, restored afterwards."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
