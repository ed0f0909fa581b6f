"""The pass-through's byte counts and their `passthrough_bytes` records (pure parts)."""

from __future__ import annotations

from core.audit import KINDS, MemoryAuditSink
from proxy.passthrough_audit import OVERFLOW_API_KEY, Counts, PassthroughCounter, PassthroughMeter, records

ZONES = {1: "use1-az1", 2: "use1-az2"}


def test_counts_add_up_per_broker_and_api_and_start_again_after_take():
    counter = PassthroughCounter()
    counter.add(2, 1, 100, 5000)  # broker 2, Fetch
    counter.add(2, 1, 110, 7000)
    counter.add(1, 1, 90, 300)
    counter.add(2, 2, 60, 80)  # ListOffsets
    assert counter.take() == {(1, 1): Counts(1, 90, 300), (2, 1): Counts(2, 210, 12000), (2, 2): Counts(1, 60, 80)}
    assert counter.take() == {}


def test_keys_beyond_the_bound_are_counted_together_per_broker():
    counter = PassthroughCounter(max_keys=2)
    counter.add(1, 1, 10, 20)
    counter.add(1, 2, 10, 20)
    counter.add(1, 8, 1, 2)  # a third key: counted under the overflow key
    counter.add(3, 9, 4, 5)  # so is a fourth, of another broker
    counter.add(1, 1, 10, 20)  # a key already held keeps counting as itself
    assert counter.take() == {(1, OVERFLOW_API_KEY): Counts(1, 1, 2), (1, 1): Counts(2, 20, 40),
                              (1, 2): Counts(1, 10, 20), (3, OVERFLOW_API_KEY): Counts(1, 4, 5)}


def test_records_name_the_broker_zone_and_fit_the_contract():
    out = records({(2, 1): Counts(2, 210, 12000), (9, 2): Counts(1, 60, 80)}, "proxy-a",
                  lambda node: ZONES.get(node, ""), 10_000)
    assert out == [
        {"proxy_id": "proxy-a", "broker_id": 2, "broker_zone": "use1-az2", "api_key": 1, "requests": 2,
         "request_bytes": 210, "response_bytes": 12000, "interval_ms": 10_000},
        {"proxy_id": "proxy-a", "broker_id": 9, "broker_zone": "", "api_key": 2, "requests": 1,
         "request_bytes": 60, "response_bytes": 80, "interval_ms": 10_000},
    ]
    assert {name for name, _t in KINDS["passthrough_bytes"]} == set(out[0])


def test_the_meter_emits_what_was_counted_and_nothing_when_idle():
    sink = MemoryAuditSink()
    meter = PassthroughMeter(sink, "proxy-a", lambda node: ZONES.get(node, ""))
    meter.add(2, 1, 100, 5000)
    meter.flush()
    meter.flush()  # nothing counted since: no record
    got = sink.of("passthrough_bytes")
    assert [(r["broker_zone"], r["api_key"], r["requests"], r["request_bytes"], r["response_bytes"]) for r in got] \
        == [("use1-az2", 1, 1, 100, 5000)]
