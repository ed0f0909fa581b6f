"""wal.gray_max_s: the WAL's gray deadline has a ceiling, as notifications' has.

A CI run on a loaded host saw WAL batches wait 17.8 s behind a hung S3: the recent PUT p99
had grown to ~3 s, so an attempt and its hedge were allowed 3 x 3 s each. With the ceiling
both end within 2 x wal.gray_max_s whatever the recent p99."""

from __future__ import annotations

import pytest

from core.configload import ConfigError
from wal_s3.config import WalConfig


def test_the_default_ceiling_is_five_seconds_and_must_not_be_below_the_floor():
    assert WalConfig(bucket="b").gray_max_s == 5.0
    with pytest.raises(ConfigError, match="wal.gray_max_s: must be >= wal.gray_floor_s"):
        WalConfig(bucket="b", gray_floor_s=6.0)
    assert WalConfig(bucket="b", gray_floor_s=6.0, gray_max_s=6.0).gray_max_s == 6.0


def test_the_writers_put_guard_and_the_readers_get_guard_stop_at_the_ceiling():
    from core.audit import MemoryAuditSink
    from wal_s3.reader import WalReader
    from wal_s3.writer import WalWriter

    config = WalConfig(bucket="b", endpoint_url="http://127.0.0.1:9", gray_max_s=4.0)
    client = object()
    writer = WalWriter(config, "az1", "proxy-a", client, MemoryAuditSink())
    reader = WalReader(config, client, MemoryAuditSink(), "az2")
    for guard in (writer.put_guard, reader._get_guard):
        for i in range(20):  # every recent request took 3 s: 3 x p99 would be 9 s
            guard.observe(float(i), 3.0)
        assert guard.deadline_s(20.0) == 4.0


MiB = 1024 * 1024


class SlowStore:
    """S3 answering a PUT after 0.1 s plus 0.15 s per MiB (16 MiB: 2.5 s), or never while `hung`."""

    def __init__(self) -> None:
        self.hung = False
        self.puts: list[int] = []  # body sizes, in order

    async def put_if_absent(self, key, body, metadata=None, *, body_crc32c=None, timing=None):
        import trio

        self.puts.append(len(body))
        if self.hung:
            await trio.sleep_forever()
        await trio.sleep(0.1 + 0.15 * len(body) / MiB)


def writer_over(store: SlowStore):
    from core.audit import MemoryAuditSink
    from wal_s3.writer import WalWriter

    writer = WalWriter(WalConfig(bucket="b", endpoint_url="http://127.0.0.1:9"), "az1", "proxy-a", object(),
                       MemoryAuditSink())
    writer._store = store  # the S3 calls below the writer's PUT deadline (no socket in this tier)
    return writer


@pytest.mark.trio
async def test_a_16_mib_put_taking_2_5_s_after_small_ones_is_not_abandoned(autojump_clock):
    """After 20 PUTs of 100 KiB (0.115 s each) the per-unit deadline is the 1 s floor; a
    16 MiB PUT is 3 units (wal.gray_unit_bytes 8 MiB): 3 s, so its healthy 2.5 s is no hang.
    It used to be abandoned at 1 s (and its hedge too)."""
    import trio

    store = SlowStore()
    writer = writer_over(store)
    gray: list[float] = []
    writer.on_gray_put = lambda zones: gray.append(trio.current_time())
    for n in range(20):
        await writer._put_conditional(f"small-{n}", bytes(100 * 1024), None)
    started = trio.current_time()
    await writer._put_conditional("big", bytes(16 * MiB), None)
    assert trio.current_time() - started == pytest.approx(2.5, abs=0.01)
    assert gray == [] and store.puts[-1] == 16 * MiB and len(store.puts) == 21


@pytest.mark.trio
async def test_a_hung_s3_is_still_abandoned_at_about_the_floor_for_a_small_put(autojump_clock):
    """The same history, then S3 hangs: a 100 KiB PUT (1 + 100 KiB / 8 MiB = 1.0122 units) is
    abandoned 1.0122 s after it started."""
    import trio

    from wal_s3.s3 import S3GrayError

    store = SlowStore()
    writer = writer_over(store)
    gray: list[float] = []
    writer.on_gray_put = lambda zones: gray.append(trio.current_time())
    for n in range(20):
        await writer._put_conditional(f"small-{n}", bytes(100 * 1024), None)
    store.hung = True
    started = trio.current_time()
    with pytest.raises(S3GrayError):
        await writer._put_conditional("stuck", bytes(100 * 1024), None)
    assert gray[0] - started == pytest.approx(1.0 + 100 / 8192, abs=0.001)
    assert len(gray) == 2  # the attempt and its hedge; then the PUT gives up
