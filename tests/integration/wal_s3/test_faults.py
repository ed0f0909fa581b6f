"""Injected S3 faults (botocore event hooks on the client under test, real moto behind it).

500, 503 SlowDown, connection resets and read timeouts must lead to retries then success,
or to a clean retriable failure; a lost response of a PUT that landed must not turn into
a false collision; a damaged object must never be accepted by the reader.
"""

from __future__ import annotations

import pytest
import trio
from botocore.exceptions import ReadTimeoutError

from core.audit import MemoryAuditSink
from tests.integration.wal_s3.conftest import Faults
from wal_s3 import metrics
from wal_s3.format import WalEntry, WalFormatError, parse_object
from wal_s3.reader import WalNotFoundError, WalReader, WalReadError
from wal_s3.writer import WalFencedError, WalWriteError, WalWriter, object_key

pytestmark = [pytest.mark.integration, pytest.mark.trio]


def entry(i: int, size: int = 100) -> WalEntry:
    return WalEntry("orders", i, 7, 0, i, 1, bytes([65 + i]) * size)


def wal_keys(client, bucket: str) -> list[str]:
    return sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])
                  if "/wal/" in o["Key"])


async def started_writer(config, client, audit) -> WalWriter:
    writer = WalWriter(config, "az1", "p1", client, audit)
    await writer.register_epoch()  # before faults are installed: they target data PUTs only
    return writer


async def test_put_500_503_reset_timeout_then_success(wal_env):
    make_config, make_client = wal_env
    config = make_config(linger_ms=5, max_attempts=6)
    client = make_client(config)
    audit = MemoryAuditSink()
    writer = await started_writer(config, client, audit)
    puts = Faults(client, "PutObject", ["500", "503", "reset", "timeout"])
    retries_before = metrics.PUT_RETRIES._value.get()
    async with writer.running():
        with trio.fail_after(20):
            p = await writer.append(entry(1), "az2")
    assert puts.requests == 5
    [flush] = audit.of("wal_flush")
    assert (flush["ok"], flush["attempts"], flush["put_requests"]) == (True, 5, 5)
    assert metrics.PUT_RETRIES._value.get() - retries_before == 4
    assert wal_keys(client, config.bucket) == [p.key]
    parsed = parse_object(client.get_object(Bucket=config.bucket, Key=p.key)["Body"].read())
    assert bytes(parsed.zones["az2"][0].batch) == b"B" * 100


async def test_put_gives_up_with_a_retriable_error_and_writer_carries_on(wal_env):
    make_config, make_client = wal_env
    config = make_config(linger_ms=5, max_attempts=3)
    client = make_client(config)
    audit = MemoryAuditSink()
    writer = await started_writer(config, client, audit)
    puts = Faults(client, "PutObject", ["503", "503", "503"])  # the 4th request passes
    failures_before = metrics.PUT_FAILURES._value.get()
    async with writer.running():
        with trio.fail_after(20):
            with pytest.raises(WalWriteError, match="after 3 attempts") as failed:
                await writer.append(entry(1), "az2")
            assert failed.value.retriable is True
            assert wal_keys(client, config.bucket) == []  # nothing partial left behind
            p = await writer.append(entry(2), "az2")
    assert puts.requests == 4
    assert [(f["sequence"], f["ok"], f["attempts"]) for f in audit.of("wal_flush")] == [(0, False, 3), (1, True, 1)]
    assert metrics.PUT_FAILURES._value.get() - failures_before == 1
    assert wal_keys(client, config.bucket) == [p.key]


async def test_lost_response_of_a_landed_put_is_recognised_as_ours(wal_env):
    make_config, make_client = wal_env
    config = make_config(linger_ms=5)
    client = make_client(config)
    audit = MemoryAuditSink()
    writer = await started_writer(config, client, audit)
    calls = []

    def lose_first_response(**_kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise ReadTimeoutError(endpoint_url="http://lost")  # the PUT reached S3; its answer did not

    client.meta.events.register("after-call.s3.PutObject", lose_first_response)
    async with writer.running():
        with trio.fail_after(20):
            p = await writer.append(entry(1), "az2")
    [flush] = audit.of("wal_flush")
    assert (flush["ok"], flush["attempts"]) == (True, 2)
    assert wal_keys(client, config.bucket) == [p.key]


async def test_foreign_object_appearing_during_retries_is_a_collision_not_an_overwrite(wal_env, s3_bucket):
    make_config, make_client = wal_env
    server, bucket = s3_bucket
    config = make_config(linger_ms=5)
    client = make_client(config)
    writer = await started_writer(config, client, MemoryAuditSink())
    key = object_key("", "az1", "p1", writer.epoch, 0)
    other = server.client()

    def squat_then_time_out(n: int):
        if n == 0:
            other.put_object(Bucket=bucket, Key=key, Body=b"foreign")
            return "timeout"
        return None

    Faults(client, "PutObject", squat_then_time_out)
    with pytest.RaisesGroup(WalFencedError, flatten_subgroups=True, allow_unwrapped=True):
        async with writer.running():
            with trio.fail_after(20), pytest.raises(WalFencedError):
                await writer.append(entry(1), "az2")
    assert other.get_object(Bucket=bucket, Key=key)["Body"].read() == b"foreign"


async def test_truncated_upload_is_never_accepted_by_the_reader(wal_env):
    """moto stores a body shorter than its x-amz-checksum-crc32 header says (AWS S3 rejects
    it with BadDigest), so the writer cannot see the damage here: the reader must."""
    make_config, make_client = wal_env
    config = make_config(linger_ms=60_000)
    client = make_client(config)
    writer = await started_writer(config, client, MemoryAuditSink())

    def truncate(request, **_kwargs):
        body = request.body.read() if hasattr(request.body, "read") else request.body
        request.body = body[:-20]
        request.headers["Content-Length"] = str(len(body) - 20)

    client.meta.events.register("before-send.s3.PutObject", truncate)
    placements = []
    async with writer.running():
        async with trio.open_nursery() as n:
            async def one(i, zone):
                placements.append(await writer.append(entry(i), zone))
            n.start_soon(one, 1, "az2")
            n.start_soon(one, 2, "az3")
            await trio.testing.wait_all_tasks_blocked()
            writer.close()
    client.meta.events.unregister("before-send.s3.PutObject", truncate)
    key = placements[0].key
    raw = client.get_object(Bucket=config.bucket, Key=key, ChecksumMode="DISABLED")
    with pytest.raises(WalFormatError):
        parse_object(raw["Body"].read())
    last = max(placements, key=lambda p: p.zone_offset)
    reader = WalReader(config, client, MemoryAuditSink(), last.dest_zone)
    with pytest.raises(WalFormatError, match="object shorter than the notified range"):
        await reader.read_zone(key, last.zone_offset, last.zone_length)
    with pytest.raises(WalFormatError):
        await reader.read_zone_by_name(key, last.dest_zone)
    assert reader.cache.bytes == 0  # nothing unverified was cached


async def test_corrupted_byte_in_a_stored_object_fails_the_zone_read(wal_env):
    make_config, make_client = wal_env
    config = make_config(linger_ms=5)
    client = make_client(config)
    async with WalWriter(config, "az1", "p1", client, MemoryAuditSink()).running() as writer:
        p = await writer.append(entry(1, 1000), "az2")
    data = bytearray(client.get_object(Bucket=config.bucket, Key=p.key)["Body"].read())
    data[p.entry_offset + 500] ^= 0x01
    client.put_object(Bucket=config.bucket, Key=p.key, Body=bytes(data))
    reader = WalReader(config, client, MemoryAuditSink(), "az2")
    with pytest.raises(WalFormatError, match="batch crc32c mismatch for orders-1"):
        await reader.read_zone(p.key, p.zone_offset, p.zone_length)


async def test_get_faults_then_success_and_clean_failure(wal_env):
    make_config, make_client = wal_env
    config = make_config(linger_ms=5, max_attempts=3)
    client = make_client(config)
    async with WalWriter(config, "az1", "p1", client, MemoryAuditSink()).running() as writer:
        p = await writer.append(entry(1), "az2")
    audit = MemoryAuditSink()
    reader = WalReader(config, client, audit, "az2")
    Faults(client, "GetObject", ["503", "reset", None, "500", "timeout", "503"])
    with trio.fail_after(20):
        got = await reader.read_zone(p.key, p.zone_offset, p.zone_length, source_zone="az1")
        assert bytes(got[0].batch) == b"B" * 100
        reader.cache = type(reader.cache)(config.cache_bytes)  # forget it, read again: all 3 attempts fail
        with pytest.raises(WalReadError, match="503") as failed:
            await reader.read_zone(p.key, p.zone_offset, p.zone_length, source_zone="az1")
    assert failed.value.retriable is True
    assert [(r["gets"], r["cache_misses"], r["source_zone"]) for r in audit.of("agent_read")] == [(3, 1, "az1")]
    with pytest.raises(WalNotFoundError):
        await reader.read_zone(p.key + "-gone", 0, 10)
