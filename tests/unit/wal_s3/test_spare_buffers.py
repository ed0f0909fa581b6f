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


def _writer():
    from core.audit import MemoryAuditSink
    from wal_s3.config import WalConfig
    from wal_s3.writer import WalWriter
    return WalWriter(WalConfig(bucket="b", endpoint_url="http://127.0.0.1:9"), "az1", "p1", object(),
                     MemoryAuditSink())


def test_a_finished_objects_buffer_is_kept_at_its_length_and_handed_out_again():
    writer = _writer()
    encoded = encode_object(writer_id="w", epoch=1, sequence=1, created_ms=0, entries_by_zone=_entries(),
                            into=bytearray(3 * 1024 * 1024))
    buffer = encoded.data.obj
    writer._recycle(encoded.data)
    # 200 KiB of entries, plus the largest header, fit the 3 MiB buffer: the same one, unresized
    again = writer._encode_buffer(200 * 1024)
    assert again is buffer and len(again) == 3 * 1024 * 1024
    again.append(0)  # the recycled view was released: nothing pins the buffer


def test_a_spare_too_short_for_the_next_object_gives_way_to_one_of_whole_mib():
    writer = _writer()
    encoded = encode_object(writer_id="w", epoch=1, sequence=1, created_ms=0, entries_by_zone=_entries(),
                            into=bytearray(1024 * 1024))
    writer._recycle(encoded.data)
    # 2.5 MiB of entries + the header bound (18,027 bytes) + the trailer: a new 3 MiB buffer
    assert len(writer._encode_buffer(2 * 1024 * 1024 + 512 * 1024)) == 3 * 1024 * 1024


def test_a_view_still_read_through_keeps_its_buffer_out_of_the_spares():
    import pickle
    writer = _writer()
    encoded = encode_object(writer_id="w", epoch=1, sequence=1, created_ms=0, entries_by_zone=_entries(),
                            into=bytearray(1024 * 1024))
    reading = pickle.PickleBuffer(encoded.data)  # an export of the view itself, as a send in progress holds
    writer._recycle(encoded.data)  # no BufferError out of the writer
    assert writer._spare_buffers == []
    reading.release()
