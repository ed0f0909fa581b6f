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
