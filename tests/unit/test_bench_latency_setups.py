"""bench/bench_latency.py: the setup names and the objects-per-second count (pure parts)."""

from __future__ import annotations

import pytest

from bench.bench_latency import objects_per_s, parse_setup


@pytest.mark.parametrize(("text", "expected"), [
    ("direct", ("direct", None, None, False)),
    ("wal-express@5", ("wal-express", 5, None, False)),
    ("wal-standard+made", ("wal-standard", None, True, False)),
    ("wal-express@5+arrival", ("wal-express", 5, False, False)),
    ("wal-express+ackwal", ("wal-express", None, None, True)),
    ("wal-standard+made+ackwal", ("wal-standard", None, True, True)),
])
def test_setup_names(text, expected):
    assert parse_setup(text) == expected


@pytest.mark.parametrize("text", ["direct@5", "direct+arrival", "wal-express+record", "wal-standard@x", "wal",
                                  "direct+ackwal", "wal-express+made+arrival", "wal-express+ackwal+ackwal"])
def test_unknown_setups_are_refused(text):
    with pytest.raises(ValueError):
        parse_setup(text)


def test_objects_per_second_counts_the_zones_flushes_inside_the_window():
    records = [{"kind": "wal_flush", "zone": "a", "ts_ms": 1_000}, {"kind": "wal_flush", "zone": "a", "ts_ms": 2_500},
               {"kind": "wal_flush", "zone": "a", "ts_ms": 3_001},  # after the window
               {"kind": "wal_flush", "zone": "b", "ts_ms": 2_000},  # another zone's proxy
               {"kind": "produce_batch", "zone": "a", "ts_ms": 2_000}]
    assert objects_per_s(records, "a", 1_000, 3_000) == 1.0  # 2 objects in 2 s
