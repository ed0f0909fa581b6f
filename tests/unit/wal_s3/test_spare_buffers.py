"""The writer reuses an encoded object's buffer only when nothing still views it.

A PUT abandoned at its gray deadline while S3 hung left a memoryview of its body alive;
the next encode into that recycled buffer raised BufferError ("Existing exports of data:
object cannot be re-sized") and stopped the proxy's WAL writer
(tests/system/reliability/test_gray_failures.py, the S3 hang, reproduced it twice).
"""

from __future__ import annotations

import pytest

from wal_s3.format import WalEntry, encode_object
from wal_s3.writer import take_reusable


def _entries() -> dict[str, list[WalEntry]]:
    batch = b"\x00" * 61 + b"\x02" + b"\x00" * 40  # opaque to the encoder beyond its length
    return {"use1-az2": [WalEntry(topic="t", partition=0, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  record_count=1, batch=batch)]}


def test_an_encode_into_a_viewed_buffer_raises_buffer_error():
    buffer = bytearray(b"\x01" * 100)  # shorter than the object: the encode grows it
    view = memoryview(buffer)
    with pytest.raises(BufferError):
        encode_object(writer_id="w", epoch=1, sequence=1, created_ms=0, entries_by_zone=_entries(), into=buffer)
    view.release()


def test_a_viewed_spare_is_dropped_and_a_free_one_taken():
    free, viewed = bytearray(b"a" * 10), bytearray(b"b" * 10)
    view = memoryview(viewed)
    spares = [free, viewed]  # popped from the end: the viewed one first
    assert take_reusable(spares) is free
    assert spares == []
    assert free == bytearray(b"a" * 10)  # the check leaves the bytes as they were
    view.release()


def test_no_spare_or_only_viewed_ones_gives_none():
    assert take_reusable([]) is None
    viewed = bytearray(10)
    view = memoryview(viewed)
    spares = [viewed]
    assert take_reusable(spares) is None
    assert spares == []
    view.release()
