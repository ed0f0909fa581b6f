"""Gray S3: a WAL PUT or ranged GET that hangs is abandoned at the deadline recent requests set.

Real sockets: the loopback fault proxy of test_fault_proxy.py in front of moto, on the
event-loop transport (the default; a boto3 call in a worker thread cannot be abandoned).
Before the fault, 20 requests give the writer or reader its history; the configured timeout
(10 s per wait for progress, 4 attempts) would have held a hung PUT for 40 s.
"""

from __future__ import annotations

import pytest
import trio

from core.audit import MemoryAuditSink
from tests.integration.wal_s3.test_fault_proxy import FaultProxy
from wal_s3.format import WalEntry
from wal_s3.reader import WalReader
from wal_s3.writer import WalWriteError, WalWriter

pytestmark = [pytest.mark.integration, pytest.mark.trio]

HISTORY = 20  # more than latency.MIN_SAMPLES (5): with fewer, no deadline below the configured timeout
FLOOR_S = 0.3


@pytest.fixture
async def gray_env(wal_env, moto_server, nursery):
    make_config, make_client = wal_env
    proxy = FaultProxy(moto_server.host, moto_server.port)
    await nursery.start(proxy.serve)
    config = make_config(endpoint_url=f"http://127.0.0.1:{proxy.port}", request_timeout_s=10.0,
                         connect_timeout_s=1.0, linger_ms=1, max_attempts=4, s3_transport="http",
                         gray_floor_s=FLOOR_S)
    return proxy, config, make_client(config)


def entry(n: int) -> WalEntry:
    return WalEntry("t", 0, 1, 0, n, 1, b"payload-%d" % n)


async def test_a_hung_put_is_abandoned_reported_and_s3_is_probed_until_it_answers(gray_env):
    proxy, config, client = gray_env
    writer = WalWriter(config, "az1", "p1", client, MemoryAuditSink())
    reported: list[tuple[str, ...]] = []
    writer.on_gray_put = reported.append
    async with writer.running():
        for n in range(HISTORY):
            await writer.append(entry(n), "az2")
        deadline_s = writer.put_guard.deadline_s(trio.current_time())
        assert deadline_s == pytest.approx(max(FLOOR_S, 3 * 0.1), abs=0.3)  # moto answers in ms: the floor
        proxy.faults.extend(["hang"] * 4)
        started = trio.current_time()
        with trio.fail_after(10), pytest.raises(WalWriteError) as failed:
            await writer.append(entry(100), "az2")
        elapsed = trio.current_time() - started
        # One attempt, one hedge, each abandoned at the deadline (plus a backoff of at most 5 ms).
        assert 2 * deadline_s <= elapsed < 2 * deadline_s + 1.0, elapsed
        assert "gray deadline" in str(failed.value) and failed.value.retriable
        assert reported == [("az2",), ("az2",)]  # reported at each timeout, before the object failed
        assert writer.put_guard.gray
        # While S3 is gray and the last probe just ended, an object fails at once, unsent.
        started = trio.current_time()
        with trio.fail_after(5), pytest.raises(WalWriteError) as refused:
            await writer.append(entry(101), "az2")
        assert "not sent" in str(refused.value) and trio.current_time() - started < deadline_s
        # S3 answers again: the next probe (no interval for the test) succeeds and ends the gray state.
        proxy.faults.clear()
        writer.put_guard.probe_interval_s = 0.0
        placement = await writer.append(entry(102), "az2")
        assert placement.key and not writer.put_guard.gray
        await writer.append(entry(103), "az2")


async def test_a_hung_get_is_abandoned_and_sent_again(gray_env):
    proxy, config, client = gray_env
    placements = []
    async with WalWriter(config, "az1", "p1", client, MemoryAuditSink()).running() as writer:
        for n in range(HISTORY + 1):
            placements.append(await writer.append(entry(n), "az2"))
    audit = MemoryAuditSink()
    reader = WalReader(config, client, audit, "az2")
    for p in placements[:HISTORY]:  # the reader's own history of GETs
        await reader.read_zone(p.key, p.zone_offset, p.zone_length)
    proxy.faults.append("hang")
    last = placements[HISTORY]
    started = trio.current_time()
    with trio.fail_after(8):
        entries = await reader.read_zone(last.key, last.zone_offset, last.zone_length)
    assert bytes(entries[0].batch) == b"payload-%d" % HISTORY
    assert trio.current_time() - started < 3.0  # the floor (0.3 s) and one more GET, not 10 s
    assert audit.of("agent_read")[-1]["gets"] == 2
