"""The writer seals an object once its requests cost at most wal.max_request_cost_share of
the transfer it replaces (through moto over HTTP)."""

from __future__ import annotations

import pytest
import trio

from core.audit import MemoryAuditSink
from core.prices import Prices
from tests.integration.wal_s3.test_writer_reader import append_all_then_close, entry
from wal_s3.format import entry_encoded_size
from wal_s3.writer import WalWriter

KiB = 1024
# $2.08/GB each way: a byte sent across costs 4.16e-9, 5 % of it 2.08e-10. One zone's requests
# (PUT 5e-6 + GET 4e-7 + checkpoint PUT 5e-6 = 1.04e-5) reach 5 % at 50,000 bytes; two
# zones' (1.58e-5) at 75,961.5 bytes.
DEAR_TRANSFER = Prices(cross_az_per_gb_each_way=2.08)


@pytest.mark.trio
async def test_objects_are_sealed_when_their_requests_are_cheap_enough(wal_env):
    make_config, make_client = wal_env
    config = make_config(max_bytes=1024 * KiB, linger_ms=60_000, max_request_cost_share=0.05)
    audit = MemoryAuditSink()
    e = entry(1, 20 * KiB)
    assert entry_encoded_size(e) == 20_522
    writer = WalWriter(config, "az1", "p1", make_client(config), audit, prices=DEAR_TRANSFER)
    async with writer.running():
        await append_all_then_close(writer, [(e, "az2")] * 7)
    # 2 entries = 41,044 < 50,000; 3 = 61,566 >= 50,000: sealed at 3, 3, then 1 at close.
    flushes = sorted(audit.of("wal_flush"), key=lambda f: f["sequence"])
    assert [(f["entries"], f["reason"]) for f in flushes] == [(3, "cost"), (3, "cost"), (1, "shutdown")]


@pytest.mark.trio
async def test_two_zones_need_a_bigger_object(wal_env):
    make_config, make_client = wal_env
    config = make_config(max_bytes=1024 * KiB, linger_ms=60_000, max_request_cost_share=0.05)
    audit = MemoryAuditSink()
    e = entry(1, 20 * KiB)
    writer = WalWriter(config, "az1", "p1", make_client(config), audit, prices=DEAR_TRANSFER)
    async with writer.running():
        await append_all_then_close(writer, [(e, "az2"), (e, "az3")] * 3)
    # Two zones: 3 entries = 61,566 < 75,961.5, 4 = 82,088 >= it: sealed at 4, then 2 at close.
    flushes = sorted(audit.of("wal_flush"), key=lambda f: f["sequence"])
    assert [(f["entries"], f["reason"]) for f in flushes] == [(4, "cost"), (2, "shutdown")]


@pytest.mark.trio
async def test_share_zero_leaves_size_and_linger(wal_env):
    make_config, make_client = wal_env
    config = make_config(max_bytes=1024 * KiB, linger_ms=60_000, max_request_cost_share=0.0)
    audit = MemoryAuditSink()
    writer = WalWriter(config, "az1", "p1", make_client(config), audit, prices=DEAR_TRANSFER)
    async with writer.running():
        with trio.fail_after(10):
            await append_all_then_close(writer, [(entry(1, 20 * KiB), "az2")] * 7)
    assert [(f["entries"], f["reason"]) for f in audit.of("wal_flush")] == [(7, "shutdown")]
