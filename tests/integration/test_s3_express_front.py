"""The S3 Express One Zone front for moto (deploy/local/s3_express.py): CreateSession, the
session token on every request, directory bucket names, expired sessions; botocore's own
S3 Express support talks to it unchanged."""

from __future__ import annotations

import http.client
import re

import boto3
import pytest
import trio
from botocore.exceptions import ClientError

from deploy.local.processes import DUMMY_CREDENTIALS
from deploy.local.s3_express import ExpressFront, bucket_of, create_directory_bucket, is_directory_bucket, serve
from tests.conftest import unique_name
from wal_s3._sigv4 import SigV4Signer

pytestmark = pytest.mark.integration

SIGNED_FOR = "AWS4-HMAC-SHA256 Credential={key}/20261126/us-east-1/{service}/aws4_request, SignedHeaders=host, Signature=00"


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def directory_bucket(moto_server) -> str:
    name = f"{unique_name('wal').lower().replace('_', '-')}--use1-az1--x-s3"
    create_directory_bucket(("127.0.0.1", moto_server.port), name)
    return name


def request(port: int, method: str, target: str, headers: dict[str, str], body: bytes = b"") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, target, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def create_session(port: int, bucket: str, mode: str = "ReadWrite") -> tuple[str, str, str]:
    status, body = request(port, "GET", f"/{bucket}?session", {
        "Authorization": SIGNED_FOR.format(key="AKIDBASE", service="s3express"), "x-amz-create-session-mode": mode})
    assert status == 200, body
    token = re.search(rb"<SessionToken>([^<]+)</SessionToken>", body)
    key = re.search(rb"<AccessKeyId>([^<]+)</AccessKeyId>", body)
    secret = re.search(rb"<SecretAccessKey>([^<]+)</SecretAccessKey>", body)
    assert token and key and secret
    return token.group(1).decode(), key.group(1).decode(), secret.group(1).decode()


def signed(port: int, method: str, path: str, token: str, key: str, secret: str) -> dict[str, str]:
    """Headers of a request signed with session credentials (the WAL's own signer, which the
    botocore test above shows the front verifies as botocore signs)."""
    headers = SigV4Signer("us-east-1", "s3express").sign(
        method, path, {"Host": f"127.0.0.1:{port}", "x-amz-s3session-token": token}, access_key=key, secret_key=secret)
    return dict(headers)


@pytest.mark.parametrize("name,expected", [
    ("wal--use1-az1--x-s3", True),
    ("wal-a--usw2-lax1-az1--x-s3", True),
    ("wal", False),                      # a general purpose bucket
    ("wal--x-s3", False),                # no AZ id
    ("Wal--use1-az1--x-s3", False),      # upper case
    ("w--al--use1-az1--x-s3", False),    # "--" inside the base name
])
def test_directory_bucket_names(name, expected):
    assert is_directory_bucket(name) is expected


def test_bucket_of_path_and_virtual_host_style():
    assert bucket_of(b"/wal--use1-az1--x-s3?session", b"127.0.0.1:1") == ("wal--use1-az1--x-s3", True)
    assert bucket_of(b"/wal--use1-az1--x-s3/k/1?session", b"h") == ("wal--use1-az1--x-s3", False)
    assert bucket_of(b"/?session", b"wal--use1-az1--x-s3.s3express-use1-az1.us-east-1.amazonaws.com") == \
        ("wal--use1-az1--x-s3", True)


@pytest.mark.trio
async def test_botocore_writes_reads_lists_and_deletes_through_sessions(moto_server):
    bucket = directory_bucket(moto_server)
    front = ExpressFront()
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(serve, ("127.0.0.1", 0), ("127.0.0.1", moto_server.port), front)

        def work() -> tuple[bytes, list[str], int]:
            s3 = boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1",
                              aws_access_key_id=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                              aws_secret_access_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
            s3.put_object(Bucket=bucket, Key="a/1", Body=b"one", IfNoneMatch="*")
            with pytest.raises(ClientError) as taken:  # conditional writes reach moto unchanged
                s3.put_object(Bucket=bucket, Key="a/1", Body=b"two", IfNoneMatch="*")
            body = s3.get_object(Bucket=bucket, Key="a/1")["Body"].read()
            keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="a/")["Contents"]]
            s3.delete_object(Bucket=bucket, Key="a/1")
            return body, keys, taken.value.response["ResponseMetadata"]["HTTPStatusCode"]

        with trio.fail_after(30):
            body, keys, taken_status = await trio.to_thread.run_sync(work)
        nursery.cancel_scope.cancel()
    assert (body, keys, taken_status) == (b"one", ["a/1"], 412)
    # one CreateSession (botocore caches the session), then PUT, PUT (412), GET, LIST, DELETE passed on
    assert front.counts == {"session": 1, "passed": 5}
    assert len(front.sessions) == 1


@pytest.mark.trio
async def test_every_request_needs_a_live_session_of_its_bucket(moto_server):
    bucket, other = directory_bucket(moto_server), directory_bucket(moto_server)
    clock = Clock()
    front = ExpressFront(session_ttl_s=300, clock=clock)
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(serve, ("127.0.0.1", 0), ("127.0.0.1", moto_server.port), front)

        def scenario() -> list[tuple[int, bytes]]:
            token, key, secret = create_session(port, bucket)
            ro = create_session(port, bucket, "ReadOnly")
            path = f"/{bucket}/k"
            out = [
                request(port, "PUT", path, {}, b"x"),                                                 # no token
                request(port, "PUT", path, signed(port, "PUT", path, "forged", key, secret), b"x"),    # unknown
                request(port, "PUT", f"/{other}/k", signed(port, "PUT", f"/{other}/k", token, key, secret), b"x"),
                request(port, "PUT", path, signed(port, "PUT", path, token, "AKIDBASE", secret), b"x"),  # key id
                request(port, "PUT", path, signed(port, "PUT", path, token, key, "not-the-secret"), b"x"),
                request(port, "PUT", path, signed(port, "PUT", path, *ro), b"x"),                      # ReadOnly
                request(port, "PUT", path, signed(port, "PUT", path, token, key, secret), b"x"),       # fine
                request(port, "GET", path, signed(port, "GET", path, *ro)),                            # ReadOnly reads
            ]
            clock.now += 300  # the session's five minutes are up
            out.append(request(port, "GET", path, signed(port, "GET", path, token, key, secret)))
            return out

        with trio.fail_after(30):
            answers = await trio.to_thread.run_sync(scenario)
        nursery.cancel_scope.cancel()
    codes = [(status, code.group(1) if (code := re.search(rb"<Code>([^<]+)</Code>", body)) else body)
             for status, body in answers]
    assert codes == [(403, b"AccessDenied"), (403, b"InvalidToken"), (403, b"AccessDenied"), (403, b"AccessDenied"),
                     (403, b"SignatureDoesNotMatch"), (403, b"AccessDenied"), (200, b""), (200, b"x"),
                     (400, b"ExpiredToken")]


@pytest.mark.trio
async def test_create_session_refusals(moto_server):
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(serve, ("127.0.0.1", 0), ("127.0.0.1", moto_server.port))

        def scenario() -> list[tuple[int, bytes]]:
            signed = {"Authorization": SIGNED_FOR.format(key="AKIDBASE", service="s3express")}
            return [
                request(port, "GET", "/plain-bucket?session", signed),                       # not a directory bucket
                request(port, "GET", "/absent--use1-az1--x-s3?session", signed),            # moto lacks it
                request(port, "GET", "/absent--use1-az1--x-s3?session", {}),                # unsigned
                request(port, "GET", "/absent--use1-az1--x-s3?session",
                        {"Authorization": SIGNED_FOR.format(key="AKIDBASE", service="s3")}),  # wrong service
            ]

        with trio.fail_after(30):
            answers = await trio.to_thread.run_sync(scenario)
        nursery.cancel_scope.cancel()
    assert [(s, re.search(rb"<Code>([^<]+)</Code>", b).group(1)) for s, b in answers] == [
        (400, b"InvalidBucketName"), (404, b"NoSuchBucket"), (403, b"AccessDenied"), (403, b"AccessDenied")]


@pytest.mark.trio
async def test_botocore_renews_a_session_before_it_expires(moto_server):
    # botocore renews S3 Express sessions inside 45 s of their expiry (its advisory window;
    # 10 s is mandatory). With 30 s sessions every call is inside that window: each request
    # gets a fresh session first, and none is ever refused as expired.
    bucket = directory_bucket(moto_server)
    front = ExpressFront(session_ttl_s=30)
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(serve, ("127.0.0.1", 0), ("127.0.0.1", moto_server.port), front)

        def work() -> None:
            s3 = boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
            for i in range(3):
                s3.put_object(Bucket=bucket, Key=f"k{i}", Body=b"x")

        with trio.fail_after(30):
            await trio.to_thread.run_sync(work)
        nursery.cancel_scope.cancel()
    # the first call's session, then one renewal per call (3), three PUTs passed, nothing refused
    assert front.counts == {"session": 4, "passed": 3}
