"""core.duplicates (pure): batch headers of fetched bytes, the backward tail search, and the answer.

Batches are built by kafka-python's DefaultRecordBatchBuilder and given base offsets by
hand, the way a leader's Fetch answer carries them.
"""

from __future__ import annotations

import struct

from kafka.record.default_records import DefaultRecordBatchBuilder

from core import errors
from core.duplicates import BatchHeader, OffsetRange, TailSearch, Verdict, batch_headers, covered_until
from kafka_upstream.direct import duplicate_result


def batch(base_offset: int, records: int, producer_id: int = -1, epoch: int = -1, seq: int = -1) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=producer_id,
                                  producer_epoch=epoch, base_sequence=seq, batch_size=1 << 20)
    for i in range(records):
        b.append(i, timestamp=None, key=None, value=b"v%d" % i, headers=[])
    data = bytearray(b.build())
    struct.pack_into(">q", data, 0, base_offset)  # baseOffset is outside the CRC: a leader sets it
    return bytes(data)


def h(base_offset: int, records: int, pid: int, epoch: int, seq: int) -> BatchHeader:
    return BatchHeader(base_offset, records - 1, pid, epoch, seq)


# --- batch_headers ----------------------------------------------------------------------

def test_headers_of_whole_batches_in_log_order():
    data = batch(100, 3, 7, 0, 30) + batch(103, 2) + batch(105, 5, 8, 1, 0)
    assert batch_headers(data) == [h(100, 3, 7, 0, 30), BatchHeader(103, 1, -1, -1, -1), h(105, 5, 8, 1, 0)]


def test_a_cut_last_batch_ends_the_list():
    whole = batch(0, 3, 7, 0, 0)
    cut = batch(3, 3, 7, 0, 3)[:-5]  # a Fetch's max_bytes may cut the last batch
    assert batch_headers(whole + cut) == [h(0, 3, 7, 0, 0)]
    assert batch_headers(whole[:60]) == []  # not even one whole header
    assert batch_headers(b"") == [] and batch_headers(None) == []


def test_not_magic_2_ends_the_list():
    bad = bytearray(batch(3, 1, 7, 0, 3))
    bad[16] = 1  # magic
    assert batch_headers(batch(0, 3, 7, 0, 0) + bytes(bad)) == [h(0, 3, 7, 0, 0)]


def test_covered_until_is_the_offset_after_the_last_batch():
    assert covered_until([h(10, 3, 1, 0, 0), h(13, 4, 2, 0, 0)], 10) == 17
    assert covered_until([], 10) == 10


# --- TailSearch -------------------------------------------------------------------------

def drive(search: TailSearch, log: list[BatchHeader]) -> list[OffsetRange]:
    """Feed the search from `log` as a leader would answer; returns the ranges it asked for."""
    asked = []
    while (rng := search.next_range()) is not None:
        asked.append(rng)
        search.feed(rng, [x for x in log if x.next_offset > rng.start and x.base_offset < rng.end])
    return asked


def test_present_near_the_end_is_found_in_the_first_window():
    log = [h(0, 10, 5, 0, 0), h(10, 10, 6, 0, 0), h(20, 10, 5, 0, 10), h(30, 5, 6, 0, 10)]
    s = TailSearch(5, 0, 10, high_watermark=35, first_window=100)
    assert drive(s, log) == [OffsetRange(0, 35)]
    assert (s.verdict, s.base_offset) == (Verdict.PRESENT, 20)


def test_absent_once_an_earlier_batch_of_the_producer_is_seen():
    # Producer 5 wrote seq 0 and seq 20; seq 10 (offsets 10-19) was consumed but never written.
    log = [h(0, 10, 5, 0, 0), h(20, 10, 5, 0, 20), h(30, 10, 6, 0, 0)]
    s = TailSearch(5, 0, 10, high_watermark=40, first_window=100)
    drive(s, log)
    assert s.verdict is Verdict.ABSENT


def test_search_goes_back_in_growing_windows_until_the_producer_shows_up():
    # The producer's batches are 1000 offsets back; other producers wrote since.
    log = [h(0, 10, 5, 0, 0), h(10, 10, 5, 0, 10)] + [h(20 + 10 * i, 10, 9, 0, 10 * i) for i in range(100)]
    s = TailSearch(5, 0, 10, high_watermark=1020, first_window=50, max_scanned=10_000)
    asked = drive(s, log)
    assert asked == [OffsetRange(970, 1020), OffsetRange(770, 970), OffsetRange(0, 770)]
    assert (s.verdict, s.base_offset) == (Verdict.PRESENT, 10)


def test_later_batches_of_the_producer_alone_do_not_prove_absence():
    # Only the producer's *later* batch is in the first window: the wanted one may be earlier.
    log = [h(0, 10, 5, 0, 0), h(10, 10, 9, 0, 0), h(20, 10, 5, 0, 10)]
    s = TailSearch(5, 0, 0, high_watermark=30, first_window=10)
    asked = drive(s, log)
    assert asked[0] == OffsetRange(20, 30)
    assert (s.verdict, s.base_offset) == (Verdict.PRESENT, 0)


def test_an_older_epoch_counts_as_earlier_and_a_newer_one_as_later():
    s = TailSearch(5, 1, 0, high_watermark=20, first_window=10)
    s.feed(OffsetRange(10, 20), [h(10, 10, 5, 0, 40)])  # epoch 0, any sequence: before epoch 1's seq 0
    assert s.verdict is Verdict.ABSENT
    s = TailSearch(5, 0, 40, high_watermark=20, first_window=10)
    s.feed(OffsetRange(10, 20), [h(10, 10, 5, 1, 0)])  # epoch 1: after everything of epoch 0
    assert s.verdict is None and s.next_range() == OffsetRange(0, 10)


def test_the_log_start_ends_the_search_absent():
    s = TailSearch(5, 0, 0, high_watermark=30, log_start=20, first_window=5)
    drive(s, [h(20, 10, 9, 0, 0)])
    assert s.verdict is Verdict.ABSENT
    assert TailSearch(5, 0, 0, high_watermark=0).verdict is Verdict.ABSENT  # empty log


def test_batches_outside_the_range_are_ignored():
    # A fetch may return a batch that starts before the range or runs past it; only a
    # batch overlapping the range counts, so an earlier window is not judged twice.
    s = TailSearch(5, 0, 10, high_watermark=100, first_window=10)
    s.feed(OffsetRange(90, 100), [h(70, 10, 5, 0, 0), h(100, 10, 5, 0, 10)])
    assert s.verdict is None


def test_a_budget_runs_out_as_unknown_and_a_failed_read_is_unknown():
    s = TailSearch(5, 0, 10, high_watermark=1000, first_window=100, max_scanned=300)
    drive(s, [h(i, 1, 9, 0, i) for i in range(1000)])
    assert s.verdict is Verdict.UNKNOWN
    s = TailSearch(5, 0, 10, high_watermark=1000)
    s.failed()
    assert s.verdict is Verdict.UNKNOWN and s.next_range() is None


# --- the producer's answer --------------------------------------------------------------

def test_answer_per_verdict():
    assert duplicate_result(Verdict.PRESENT, 42, 5, 10).error_code == errors.NONE
    assert duplicate_result(Verdict.PRESENT, 42, 5, 10).base_offset == 42
    absent = duplicate_result(Verdict.ABSENT, -1, 5, 10)
    assert absent.error_code == errors.UNKNOWN_SERVER_ERROR and not errors.is_retriable(absent.error_code)
    assert "producer 5 sequence 10" in absent.error_message
    unknown = duplicate_result(Verdict.UNKNOWN, -1, 5, 10)
    assert unknown.error_code == errors.REQUEST_TIMED_OUT and errors.is_retriable(unknown.error_code)
