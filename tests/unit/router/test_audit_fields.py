"""produce_batch's timing and byte fields from the instants the backend measures (by hand)."""

from __future__ import annotations

import pytest

from router.audit_fields import NOT_APPLICABLE, notification_share, wal_leader_append_ms, wal_timing_fields, wire_bytes


@pytest.mark.parametrize(("route", "size", "share", "expected"), [
    # a direct cross-zone batch puts itself and its 8 + 33 bytes of Produce entries across
    ("direct_cross", 1_000, 0, 1_041),
    ("local", 1_000, 0, 0),
    # a WAL batch: its share of the notification round trip, when the sender said
    ("wal", 1_000, 100, 100),
    ("wal", 1_000, 0, 0),
])
def test_wire_bytes(route, size, share, expected):
    assert wire_bytes(route, size, share) == expected


@pytest.mark.parametrize(("request_bytes", "response_bytes", "entries", "share"), [
    (300, 100, 4, 100),  # 400 / 4
    (301, 100, 2, 201),  # 200.5 rounds up
    (300, 100, 3, 133),  # 133.3
    (300, 100, 0, 0),
])
def test_notification_share_is_equal_per_entry(request_bytes, response_bytes, entries, share):
    assert notification_share(request_bytes, response_bytes, entries) == share


@pytest.mark.parametrize(("instants", "expected"), [
    # received 10.000, buffered 10.001, sealed 10.251 (250 ms linger), durable 10.281,
    # agent answered 10.291: the PUT took 30 ms, not 280.
    ((10.000, 10.001, 10.251, 10.281, 10.291),
     {"queue_ms": 1.0, "linger_wait_ms": 250.0, "s3_put_ms": 30.0, "notify_rtt_ms": 10.0}),
    # sealed by size before this batch's buffering was stamped (the batch filled it): no wait
    ((5.0, 5.002, 5.001, 5.042, 5.050),
     {"queue_ms": 2.0, "linger_wait_ms": 0.0, "s3_put_ms": 40.0, "notify_rtt_ms": 8.0}),
    # the object never became durable: only the queue and the linger are known
    ((1.0, 1.5, 2.0, 0.0, 0.0),
     {"queue_ms": 500.0, "linger_wait_ms": 500.0, "s3_put_ms": NOT_APPLICABLE, "notify_rtt_ms": NOT_APPLICABLE}),
    # ack_mode wal: durable, never notified before the answer
    ((1.0, 1.001, 1.101, 1.201, 0.0),
     {"queue_ms": 1.0, "linger_wait_ms": 100.0, "s3_put_ms": 100.0, "notify_rtt_ms": NOT_APPLICABLE}),
    # a writer that does not report its seal time: the PUT interval starts at buffering
    ((1.0, 1.001, 0.0, 1.101, 1.111),
     {"queue_ms": 1.0, "linger_wait_ms": NOT_APPLICABLE, "s3_put_ms": 100.0, "notify_rtt_ms": 10.0}),
])
def test_wal_timing_fields_each_cover_their_own_interval(instants, expected):
    got = wal_timing_fields(*instants)
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, abs=1e-6), name


@pytest.mark.parametrize(("append_us", "expected"), [
    (2_345, 2.345),  # the agent's answer said 2,345 us
    (0, 0.0),  # an append under a microsecond is still a known time
    (-1, NOT_APPLICABLE),  # duplicate from the agent's map, refused, or ack_mode wal: not known
])
def test_wal_leader_append_ms_comes_from_the_agents_answer(append_us, expected):
    assert wal_leader_append_ms(append_us) == expected
