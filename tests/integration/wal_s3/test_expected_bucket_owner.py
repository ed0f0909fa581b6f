"""wal.expected_bucket_owner reaches S3 on every request, through both transports: moto's
request recorder (on the shared moto server) shows the headers moto received."""

from __future__ import annotations

import json
import urllib.request

import pytest
import trio

from deploy.local.processes import DUMMY_CREDENTIALS
from tests.conftest import unique_name
from wal_s3._s3_http import http_transport
from wal_s3.config import WalConfig
from wal_s3.s3 import make_s3_client

pytestmark = pytest.mark.integration

OWNER = "111122223333"


def _recorder(moto, action: str) -> bytes:
    method = "GET" if action == "download-recording" else "POST"
    request = urllib.request.Request(f"{moto.endpoint_url}/moto-api/recorder/{action}", method=method)
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.read()


def _received(moto, bucket: str) -> list[tuple[str, str | None]]:
    """(method, x-amz-expected-bucket-owner or None) of each recorded request to `bucket`."""
    out = []
    for line in _recorder(moto, "download-recording").decode().splitlines():
        entry = json.loads(line)
        if f"/{bucket}" in entry["url"] or f"//{bucket}." in entry["url"]:
            headers = {k.lower(): v for k, v in entry["headers"].items()}
            out.append((entry["method"], headers.get("x-amz-expected-bucket-owner")))
    return out


@pytest.fixture
def recording(moto_server, monkeypatch):
    for k, v in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    bucket = unique_name("owned")
    moto_server.create_bucket(bucket)
    _recorder(moto_server, "reset-recording")
    _recorder(moto_server, "start-recording")
    try:
        yield moto_server, bucket
    finally:
        _recorder(moto_server, "stop-recording")


def test_every_boto3_request_names_the_owner(recording):
    moto, bucket = recording
    client = make_s3_client(WalConfig(bucket=bucket, region="us-east-1", endpoint_url=moto.endpoint_url, expected_bucket_owner=OWNER))
    client.put_object(Bucket=bucket, Key="wal/a", Body=b"abc", IfNoneMatch="*")
    assert client.get_object(Bucket=bucket, Key="wal/a")["Body"].read() == b"abc"
    assert [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix="wal/")["Contents"]] == ["wal/a"]
    client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "wal/a"}]})
    # without the setting nothing is added (the header above is ours, not botocore's)
    make_s3_client(WalConfig(bucket=bucket, region="us-east-1", endpoint_url=moto.endpoint_url)).head_bucket(Bucket=bucket)
    assert _received(moto, bucket) == [("PUT", OWNER), ("GET", OWNER), ("GET", OWNER), ("POST", OWNER),
                                       ("HEAD", None)]


def test_every_event_loop_put_and_get_names_the_owner(recording):
    moto, bucket = recording
    config = WalConfig(bucket=bucket, region="us-east-1", endpoint_url=moto.endpoint_url, expected_bucket_owner=OWNER,
                       s3_transport="http")
    http = http_transport(make_s3_client(config), config, bucket)
    assert http is not None

    async def put_and_get() -> bytes:
        try:
            await http.put("wal/b", b"0123456789", {"If-None-Match": "*"})
            return await http.get_range("wal/b", 2, 3)
        finally:
            await http.aclose()

    assert trio.run(put_and_get) == b"234"
    # the URL probe (bucket_url_of) is answered inside botocore and never sent
    assert _received(moto, bucket) == [("PUT", OWNER), ("GET", OWNER)]
