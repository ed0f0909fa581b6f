"""wal_s3: write-ahead-log objects in S3 - format, batching writer, range reader, checkpoints, GC.

`wal_s3.format` and `wal_s3.checkpoint_manifest` are pure (no trio, no boto3); the rest
are I/O shells around them: the writer and GC on trio, the reader (used by the asyncio
agent and by trio code alike) and the boto3 adapter on anyio. The
names below load lazily so that importing `wal_s3.format` does not import trio or boto3.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "make_s3_client": "wal_s3._s3",
    "WalConfig": "wal_s3.config",
    "EntryRef": "wal_s3.format", "WalEntry": "wal_s3.format", "WalFormatError": "wal_s3.format",
    "ZoneShare": "wal_s3.format",
    "CheckpointError": "wal_s3.gc", "Checkpoints": "wal_s3.gc", "GcError": "wal_s3.gc", "GcReport": "wal_s3.gc",
    "run_gc": "wal_s3.gc", "run_gc_periodically": "wal_s3.gc", "checkpoint_key": "wal_s3.gc",
    "BlockCache": "wal_s3.reader", "WalNotFoundError": "wal_s3.reader", "WalReader": "wal_s3.reader",
    "WalReadError": "wal_s3.reader",
    "FlushedObject": "wal_s3.writer", "PendingEntry": "wal_s3.writer", "WalFencedError": "wal_s3.writer",
    "WalPlacement": "wal_s3.writer",
    "WalWriteError": "wal_s3.writer", "WalWriter": "wal_s3.writer", "object_key": "wal_s3.writer",
    "epoch_marker_prefix": "wal_s3.writer",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'wal_s3' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
