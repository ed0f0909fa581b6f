"""An idle audit writer thread sleeps until its next deadline; the next record wakes it."""

from __future__ import annotations

import threading

import pytest

from spark_audit.config import AuditConfig
from spark_audit.writer import IDLE_WAIT_MAX_S, QUEUE_POLL_S, AuditWriter, idle_wait_s
from tests.integration.spark_audit.conftest import H0_MS

WAIT_S = 10.0  # bound on each of the test's waits for the writer thread


def test_without_open_files_an_idle_thread_waits_the_longest_it_may():
    assert idle_wait_s(100.0, [], roll_seconds=300, flush_seconds=1.0) == IDLE_WAIT_MAX_S


def test_an_idle_thread_wakes_for_the_next_roll_or_sync_whichever_comes_first():
    # opened at 90 (rolls at 390), lines written since the sync at 99.5 (synced by 100.5)
    assert idle_wait_s(100.0, [(90.0, 99.5)], roll_seconds=300, flush_seconds=1.0) == pytest.approx(0.5)
    # nothing unsynced: only the roll, 20 s away, within the cap
    assert idle_wait_s(100.0, [(90.0, None)], roll_seconds=30, flush_seconds=1.0) == pytest.approx(20.0)
    # two files: the earlier roll wins
    assert idle_wait_s(100.0, [(90.0, None), (95.0, None)], roll_seconds=15, flush_seconds=1.0) == pytest.approx(5.0)
    # a roll far off: the cap
    assert idle_wait_s(100.0, [(90.0, None)], roll_seconds=3600, flush_seconds=1.0) == IDLE_WAIT_MAX_S
    # overdue: no wait at all
    assert idle_wait_s(100.0, [(0.0, None)], roll_seconds=30, flush_seconds=1.0) == 0.0


class RecordingEvent(threading.Event):
    """An Event that tells the test each timeout its waiter asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float | None] = []
        self.asked = threading.Condition()

    def wait(self, timeout: float | None = None) -> bool:
        with self.asked:
            self.timeouts.append(timeout)
            self.asked.notify_all()
        return super().wait(timeout)

    def next_wait(self, after: int, predicate) -> float | None:
        """The first timeout asked for after the first `after` that satisfies `predicate`."""
        with self.asked:
            found = self.asked.wait_for(lambda: any(predicate(t) for t in self.timeouts[after:]), WAIT_S)
            assert found, f"the writer thread asked for no such wait: {self.timeouts}"
            return next(t for t in self.timeouts[after:] if predicate(t))


def long_wait(timeout: float | None) -> bool:
    return timeout is None or timeout > QUEUE_POLL_S


def test_an_idle_writer_sleeps_until_a_record_comes_and_then_until_its_sync(tmp_path):
    writer = AuditWriter(AuditConfig(output=str(tmp_path), flush_seconds=1.0), zone="z", component="proxy",
                         start=False)
    event = writer._wake = RecordingEvent()  # noqa: SLF001 - the thread's only wait
    writer.start()
    try:
        # Nothing queued, no file open: the thread sleeps as long as it may, not QUEUE_POLL_S.
        assert event.next_wait(0, long_wait) == IDLE_WAIT_MAX_S
        seen = len(event.timeouts)
        writer.emit("metadata_lookup", {"ts_ms": H0_MS, "topic": "t", "partition": 0, "cache": "hit"})
        # The record woke it: written long before the IDLE_WAIT_MAX_S sleep would have ended.
        with event.asked:
            assert event.asked.wait_for(lambda: writer.stats().written == 1, WAIT_S)
        # Then a file is open with a line not yet sync-flushed: the next long sleep ends by
        # the sync, at most flush_seconds.
        assert 0.0 < event.next_wait(seen, long_wait) <= 1.0
    finally:
        assert writer.close(WAIT_S)
    assert writer.stats().written == 1 and writer.stats().files == 1


def test_a_rejected_record_wakes_an_idle_writer_for_its_drop_record(tmp_path):
    writer = AuditWriter(AuditConfig(output=str(tmp_path)), zone="z", component="proxy", start=False)
    event = writer._wake = RecordingEvent()  # noqa: SLF001
    writer.start()
    try:
        assert event.next_wait(0, long_wait) == IDLE_WAIT_MAX_S
        writer.emit("no_such_kind", {})
        with event.asked:  # the audit_drop record is written without waiting out the sleep
            assert event.asked.wait_for(lambda: writer.stats().written == 1, WAIT_S)
    finally:
        assert writer.close(WAIT_S)
    assert writer.stats().rejected == 1
