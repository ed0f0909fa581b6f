"""Block cache accounting on scripted reads against moto; expected counts worked out by hand."""

from __future__ import annotations

import threading

import pytest
import trio
import trio.testing

from core.audit import MemoryAuditSink
from tests.integration.wal_s3.conftest import Faults
from wal_s3 import metrics
from wal_s3 import reader as reader_module
from wal_s3.format import WalEntry, WalFormatError, encode_object
from wal_s3.reader import WalReader

pytestmark = [pytest.mark.integration, pytest.mark.trio]

ZONE_BYTES = 2 + 1 + 30 + 4 + 1000  # topic len + "t" + fixed fields + header crc + batch = 1037


def put_object(client, bucket: str, key: str) -> dict:
    enc = encode_object(writer_id="w", epoch=1, sequence=1, created_ms=0, entries_by_zone={
        z: [WalEntry("t", i, 1, 0, 0, 1, bytes([i]) * 1000)] for i, z in enumerate(("za", "zb", "zc", "zd"))})
    client.put_object(Bucket=bucket, Key=key, Body=enc.data)
    return {z: (s.offset, s.length) for z, s in enc.zones.items()}


async def test_scripted_reads_hits_misses_evictions(wal_env):
    make_config, make_client = wal_env
    config = make_config(cache_bytes=2100)  # room for two 1037-byte ranges, not three
    client = make_client(config)
    ranges = put_object(client, config.bucket, "obj")
    assert all(length == ZONE_BYTES for _, length in ranges.values())
    gets = Faults(client, "GetObject", [])
    audit = MemoryAuditSink()
    reader = WalReader(config, client, audit, "agent")
    hits0, misses0, ev0 = (metrics.CACHE_HITS._value.get(), metrics.CACHE_MISSES._value.get(),
                           metrics.CACHE_EVICTIONS._value.get())

    script = [  # zone read -> expected (hit?, evictions so far); LRU order after each step in comments
        ("za", False, 0),  # miss            [a]
        ("za", True, 0),   # hit             [a]
        ("zb", False, 0),  # miss            [a b]
        ("za", True, 0),   # hit             [b a]
        ("zc", False, 1),  # miss, evicts b  [a c]
        ("zb", False, 2),  # miss, evicts a  [c b]
        ("zc", True, 2),   # hit             [b c]
        ("za", False, 3),  # miss, evicts b  [c a]
    ]
    for zone, hit, evictions in script:
        off, length = ranges[zone]
        entries = await reader.read_zone("obj", off, length, source_zone="src")
        assert bytes(entries[0].batch)[:1] == bytes([("za", "zb", "zc", "zd").index(zone)])
        assert reader.evictions == evictions
    assert (reader.hits, reader.misses, reader.evictions) == (3, 5, 3)
    assert gets.requests == 5
    assert reader.cache.bytes == 2 * ZONE_BYTES
    assert [(r["cache_hits"], r["cache_misses"], r["gets"], r["bytes_from_cache"]) for r in audit.of("agent_read")] == [
        (0, 1, 1, 0), (1, 0, 0, 1037), (0, 1, 1, 0), (1, 0, 0, 1037),
        (0, 1, 1, 0), (0, 1, 1, 0), (1, 0, 0, 1037), (0, 1, 1, 0)]
    assert metrics.CACHE_HITS._value.get() - hits0 == 3
    assert metrics.CACHE_MISSES._value.get() - misses0 == 5
    assert metrics.CACHE_EVICTIONS._value.get() - ev0 == 3


async def test_concurrent_reads_of_one_range_make_one_get(wal_env):
    make_config, make_client = wal_env
    config = make_config()
    client = make_client(config)
    ranges = put_object(client, config.bucket, "obj")
    gets = Faults(client, "GetObject", [])
    gets.gate = threading.Event()  # hold the GET until all five readers are waiting
    reader = WalReader(config, client, MemoryAuditSink(), "agent")
    results = []

    async def read():
        results.append(await reader.read_zone("obj", *ranges["zb"]))

    with trio.fail_after(20):
        async with trio.open_nursery() as n:
            for _ in range(5):
                n.start_soon(read)
            await trio.to_thread.run_sync(gets.wait_requests, 1)
            await trio.testing.wait_all_tasks_blocked()
            gets.gate.set()
    assert gets.requests == 1
    assert (reader.hits, reader.misses) == (4, 1)
    assert all(bytes(r[0].batch) == b"\x01" * 1000 for r in results)


async def test_range_larger_than_the_cache_is_served_but_not_cached(wal_env):
    make_config, make_client = wal_env
    config = make_config(cache_bytes=1000)  # smaller than one 1037-byte range
    client = make_client(config)
    ranges = put_object(client, config.bucket, "obj")
    gets = Faults(client, "GetObject", [])
    reader = WalReader(config, client, MemoryAuditSink(), "agent")
    for _ in range(2):
        await reader.read_zone("obj", *ranges["zd"])
    assert (reader.hits, reader.misses, reader.evictions, reader.cache.bytes, gets.requests) == (0, 2, 0, 0, 2)


async def test_a_range_is_parsed_once_and_a_hit_still_checks_the_entry_count(wal_env, monkeypatch):
    make_config, make_client = wal_env
    config = make_config()
    client = make_client(config)
    ranges = put_object(client, config.bucket, "obj")
    parses = []
    real_parse = reader_module.parse_zone_range

    def counting_parse(data, expected_entries=None):
        parses.append(len(data))
        return real_parse(data, expected_entries)

    monkeypatch.setattr(reader_module, "parse_zone_range", counting_parse)
    reader = WalReader(config, client, MemoryAuditSink(), "agent")
    first = await reader.read_zone("obj", *ranges["zc"], expected_entries=1)  # the GET parses
    first.clear()  # the caller's list is its own: the cached entries stay whole
    again = await reader.read_zone("obj", *ranges["zc"], expected_entries=1)  # a hit: no parse
    assert parses == [ZONE_BYTES]
    assert (reader.hits, reader.misses) == (1, 1)
    assert [(e.topic, e.partition, bytes(e.batch)) for e in again] == [("t", 2, b"\x02" * 1000)]
    with pytest.raises(WalFormatError, match="holds 1 entries, index says 2"):
        await reader.read_zone("obj", *ranges["zc"], expected_entries=2)
    assert parses == [ZONE_BYTES]
