"""deploy/local/moto_atomic.py: two If-Match PUTs against the same version, interleaved so
that both pass moto's condition check before either stores, must not both succeed.

The interleaving is forced, not hoped for: moto's store step (S3Backend.put_object, called
after the check) holds the first PUT until the second PUT has reached the store step too.
Unpatched moto lets the second one through (both answer 200: a lost update, what Tansu's
shared meta.json suffered in finding 2); with the check and store under one lock the second
PUT waits, sees the new ETag and gets 412. The first PUT's wait is bounded: with the lock the
second PUT cannot arrive, and the first goes on after SECOND_PUT_WAIT_S.
"""

from __future__ import annotations

import threading

import boto3
import botocore.exceptions
import pytest
from moto.server import ThreadedMotoServer

from deploy.local.moto_atomic import make_conditional_puts_atomic
from deploy.local.processes import DUMMY_CREDENTIALS, free_port

SECOND_PUT_WAIT_S = 1.0
KEY = "clusters/c/meta.json"


def _client(port: int):
    return boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                        aws_access_key_id=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])


def _racing_if_match_puts(port: int) -> tuple[list[str], bytes]:
    """Two threads PUT KEY If-Match the same ETag; returns their outcomes and the final body."""
    from moto.s3.models import S3Backend  # noqa: PLC0415

    client = _client(port)
    client.create_bucket(Bucket="race")
    etag = client.put_object(Bucket="race", Key=KEY, Body=b"v0")["ETag"]
    original_store = S3Backend.put_object
    arrivals: list[bytes] = []
    second_arrived = threading.Event()

    def held_store(self, bucket_name, key_name, value, *args, **kwargs):
        if key_name == KEY:
            arrivals.append(bytes(value))
            if len(arrivals) == 1:
                second_arrived.wait(SECOND_PUT_WAIT_S)
            else:
                second_arrived.set()
        return original_store(self, bucket_name, key_name, value, *args, **kwargs)

    outcomes: dict[str, str] = {}

    def put(body: bytes) -> None:
        try:
            _client(port).put_object(Bucket="race", Key=KEY, Body=body, IfMatch=etag)
            outcomes[body.decode()] = "200"
        except botocore.exceptions.ClientError as exc:
            outcomes[body.decode()] = exc.response["Error"]["Code"]

    S3Backend.put_object = held_store
    try:
        threads = [threading.Thread(target=put, args=(body,)) for body in (b"from-a", b"from-b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
            assert not t.is_alive(), "a PUT did not finish"
    finally:
        S3Backend.put_object = original_store
    final = client.get_object(Bucket="race", Key=KEY)["Body"].read()
    return sorted(outcomes.values()), final


@pytest.fixture
def in_process_moto():
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield port
    finally:
        server.stop()


def test_unpatched_moto_loses_an_update(in_process_moto):
    # Documents the race the launcher exists for; if a moto upgrade fixes it, this fails
    # and the launcher can go.
    outcomes, _final = _racing_if_match_puts(in_process_moto)
    assert outcomes == ["200", "200"]


def test_atomic_conditional_puts_refuse_the_stale_one(in_process_moto):
    undo = make_conditional_puts_atomic()
    try:
        outcomes, final = _racing_if_match_puts(in_process_moto)
    finally:
        undo()
    assert outcomes == ["200", "PreconditionFailed"]
    assert final in (b"from-a", b"from-b")


def test_launched_moto_refuses_a_stale_if_match(moto_server):
    # The process the harness starts (start_moto -> moto_atomic.py) serves conditional PUTs.
    client = moto_server.client()
    client.create_bucket(Bucket="stale-if-match")
    first = client.put_object(Bucket="stale-if-match", Key="k", Body=b"one")["ETag"]
    client.put_object(Bucket="stale-if-match", Key="k", Body=b"two", IfMatch=first)
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        client.put_object(Bucket="stale-if-match", Key="k", Body=b"three", IfMatch=first)
    assert refused.value.response["Error"]["Code"] == "PreconditionFailed"
    assert client.get_object(Bucket="stale-if-match", Key="k")["Body"].read() == b"two"
