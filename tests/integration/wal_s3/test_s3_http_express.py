"""S3 Express One Zone sessions in the event-loop transport (wal_s3/_s3_http.py), against the
directory bucket front (deploy/local/s3_express.py, which verifies each signature with the
session's secret) in front of moto."""

from __future__ import annotations

import http.client

import boto3
import pytest
import trio
from botocore.credentials import Credentials

from deploy.local.processes import DUMMY_CREDENTIALS
from deploy.local.s3_express import ExpressFront, create_directory_bucket, serve
from tests.conftest import unique_name
from wal_s3._express import ExpressSession, needs_refresh, parse_create_session, session_target
from wal_s3._s3_http import S3Http, http_transport
from wal_s3.config import WalConfig
from wal_s3.s3 import S3TransientError

pytestmark = pytest.mark.integration


MOTO_AUTH = "AWS4-HMAC-SHA256 Credential=testing/20261126/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00"


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def test_parse_create_session_and_refresh_rule():
    body = (b'<?xml version="1.0"?><CreateSessionResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            b"<Credentials><SessionToken>tok-123</SessionToken><SecretAccessKey>sec-456</SecretAccessKey>"
            b"<AccessKeyId>K</AccessKeyId><Expiration>2027-01-15T08:00:00Z</Expiration></Credentials>"
            b"</CreateSessionResult>")
    session = parse_create_session(body)
    assert session == ExpressSession("K", "sec-456", "tok-123", 1_800_000_000.0)  # 2027-01-15T08:00:00Z
    assert "sec-456" not in repr(session) and "tok-123" not in repr(session)
    assert needs_refresh(None, 0.0)
    assert not needs_refresh(session, 1_800_000_000.0 - 60.001)
    assert needs_refresh(session, 1_800_000_000.0 - 60.0)  # the last minute: renew
    assert session_target("/wal--use1-az1--x-s3/") == "/wal--use1-az1--x-s3"
    assert session_target("/") == "/"


@pytest.fixture
async def express(moto_server, nursery):
    """(front, its clock, S3Http on a fresh directory bucket, its clock, bucket)."""
    bucket = f"{unique_name('wal')}--use1-az1--x-s3"
    create_directory_bucket(("127.0.0.1", moto_server.port), bucket)
    front_clock, client_clock = Clock(), Clock()
    front = ExpressFront(session_ttl_s=300, clock=front_clock)
    host, port = await nursery.start(serve, ("127.0.0.1", 0), ("127.0.0.1", moto_server.port), front)
    http = S3Http(bucket_url=f"http://{host}:{port}/{bucket}/", region="us-east-1",
                  credentials=Credentials("AKIDBASE", "base-secret"), connect_timeout_s=5, request_timeout_s=10,
                  max_idle=4, express=True, clock=client_clock)
    yield front, front_clock, http, client_clock, bucket
    await http.aclose()


@pytest.mark.trio
async def test_put_and_ranged_get_share_one_session(express, moto_server):
    front, _, s3http, _, bucket = express
    with trio.fail_after(20):
        await s3http.put("a/1", b"0123456789", {"If-None-Match": "*"})
        assert await s3http.get_range("a/1", 2, 5) == b"23456"
        assert await s3http.get_range("a/1", 0, 3) == b"012"
    assert s3http.sessions_created == 1
    assert front.counts == {"session": 1, "passed": 3}
    # the object is really in moto, under the directory bucket (read past the front; moto checks no signature)
    def read_from_moto() -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", moto_server.port, timeout=10)
        try:
            conn.request("GET", f"/{bucket}/a/1", headers={"Authorization": MOTO_AUTH})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    assert await trio.to_thread.run_sync(read_from_moto) == (200, b"0123456789")


@pytest.mark.trio
async def test_session_is_renewed_in_its_last_minute_before_any_request_fails(express):
    front, front_clock, http, client_clock, _ = express
    with trio.fail_after(20):
        await http.put("b/1", b"x", {})
        for clock in (front_clock, client_clock):
            clock.now += 239.0  # 61 s left: still the first session
        await http.put("b/2", b"x", {})
        assert http.sessions_created == 1
        for clock in (front_clock, client_clock):
            clock.now += 2.0  # 59 s left: renewed before the request
        await http.put("b/3", b"x", {})
    assert http.sessions_created == 2
    assert front.counts == {"session": 2, "passed": 3}  # no request was refused


@pytest.mark.trio
async def test_expired_token_answer_drops_the_session_for_the_retry(express):
    front, front_clock, http, _, _ = express
    with trio.fail_after(20):
        await http.put("c/1", b"x", {})
        front_clock.now += 300.0  # S3's view: the session ran out (the client's clock lags)
        with pytest.raises(S3TransientError, match="ExpiredToken"):
            await http.put("c/2", b"x", {})
        await http.put("c/2", b"x", {})  # the caller's retry: a new session
    assert http.sessions_created == 2
    assert front.counts == {"session": 2, "passed": 2, "400": 1}


def test_http_transport_of_an_express_config_uses_sessions(monkeypatch):
    for name, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    config = WalConfig(bucket="wal", region="us-east-1", storage_class="express", endpoint_url="http://127.0.0.1:9", s3_transport="http")
    client = boto3.client("s3", endpoint_url=config.endpoint_url, region_name="us-east-1")
    transport = http_transport(client, config, config.bucket_for("use1-az2"))
    assert transport is not None and transport.express
    assert transport.bucket_url == "http://127.0.0.1:9/wal--use1-az2--x-s3/"
