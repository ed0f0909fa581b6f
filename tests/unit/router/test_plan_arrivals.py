"""The planner's arrival model (planner/plan.py): produce requests as the unit that opens WAL
objects, closed-loop producers, notification sizes and checkpoint timing from audit records.
Expected values worked out by hand; linger 250 ms, max_bytes 8 MiB (never reached here)."""

from __future__ import annotations

import math

import pytest

from core.prices import Prices
from planner.plan import ClassPrices, Flow, PlanError, WalSettings, closed_loop_requests_per_s, plan_mode
from planner.profile import REQUEST_GAP_S, flow_from_row, flows_from_produce_batches
from planner.replay import Arrival, applies_from_records, manifests, notify_sizes_from_records, replay_usage

LIST = Prices()
STANDARD = ClassPrices("standard", 0.005, 0.0004)
WAL = WalSettings(policy="wal")


def test_a_hosts_requests_carry_every_zone_so_its_rate_is_the_largest():
    # 2 requests/s, each with a batch for az2 and one for az3: one stream of 2/s, not 4/s
    flows = [Flow("h", "az1", "az2", 500_000, 5, 2), Flow("h", "az1", "az3", 500_000, 5, 2)]
    bill = plan_mode(flows, "sidecar", WAL, STANDARD, LIST)
    # objects 1/(0.25 + 1/2) = 1.333333333/s; every request carries both zones: a share each
    assert bill.usage.objects == pytest.approx(1.333333333)
    assert bill.usage.shares == pytest.approx(2 * 1.333333333)


@pytest.mark.parametrize("mode, objects", [
    ("sidecar", 4 * 1 / (0.25 + 1.0)),  # four writers of 1 request/s: 0.8/s each
    ("gateway", 1 / (0.25 + 1 / 4)),  # one writer of 4 requests/s: 2/s
])
def test_requests_of_several_hosts_add_up_at_a_gateway(mode, objects):
    flows = [Flow(f"h{i}", "az1", "az2", 100_000, 2, 1) for i in range(4)]
    assert plan_mode(flows, mode, WAL, STANDARD, LIST).usage.objects == pytest.approx(objects)


def test_a_host_without_requests_on_every_row_counts_batches():
    # az3 has no request rate: the host's arrivals are its 3 + 2 batches/s, each on its own
    flows = [Flow("h", "az1", "az2", 300_000, 3, 1), Flow("h", "az1", "az3", 200_000, 2)]
    assert plan_mode(flows, "sidecar", WAL, STANDARD, LIST).usage.objects == pytest.approx(1 / (0.25 + 0.2))


@pytest.mark.parametrize("latency_ms, in_flight, rate", [(500, 1, 2.0), (500, 2, 4.0), (2_000, 1, 0.5)])
def test_closed_loop_request_rate(latency_ms, in_flight, rate):
    assert closed_loop_requests_per_s(latency_ms, in_flight) == rate


@pytest.mark.parametrize("latency_ms, in_flight", [(0, 1), (-5, 1), (math.nan, 1), (100, 0)])
def test_closed_loop_needs_a_positive_latency_and_in_flight(latency_ms, in_flight):
    with pytest.raises(PlanError, match="wal latency"):
        closed_loop_requests_per_s(latency_ms, in_flight)


ROW = {"host": "h", "zone": "az1", "leader_zone": "az2", "bytes_per_s": "100000"}


@pytest.mark.parametrize("extra, closed_loop, batches, requests", [
    ({}, None, 100_000 / 16384, 0.0),  # open loop: batches of --batch-bytes, each its own arrival
    ({}, 2.0, 2.0, 2.0),  # closed loop: a batch per request
    ({"batches_per_s": "5"}, 2.0, 5.0, 2.0),
    ({"requests_per_s": "1"}, 2.0, 1.0, 1.0),  # the measured column wins
    ({"requests_per_s": "1", "batches_per_s": "3"}, None, 3.0, 1.0),
    ({"bytes_per_s": "0"}, 2.0, 0.0, 0.0),  # no traffic, no requests
])
def test_csv_rows_with_requests(extra, closed_loop, batches, requests):
    flow = flow_from_row({**ROW, **extra}, 16384, closed_loop_requests_per_s=closed_loop)
    assert (flow.batches_per_s, flow.requests_per_s) == pytest.approx((batches, requests))


def test_csv_row_with_more_requests_than_batches_is_refused():
    with pytest.raises(PlanError, match="p.csv:2: requests_per_s: 3 is more than batches_per_s 2"):
        flow_from_row({**ROW, "requests_per_s": "3", "batches_per_s": "2"}, where="p.csv:2: ")


def _pb(received_ms, leader, latency_ms=100.0, proxy="p1"):
    return {"kind": "produce_batch", "ts_ms": received_ms + int(latency_ms), "latency_ms": latency_ms,
            "proxy_id": proxy, "zone": "az1", "leader_zone": leader, "bytes": 1000, "route": "wal", "error_code": 0}


def test_batches_received_together_are_one_request():
    assert REQUEST_GAP_S == 0.005
    records = [_pb(0, "az2"), _pb(0, "az3", latency_ms=300.0), _pb(4, "az2"),  # one request: 0..4 ms
               _pb(500, "az2"),  # a second, az2 only
               _pb(1_000, "az3"), _pb(1_006, "az3")]  # 6 ms apart: two requests
    flows, window = flows_from_produce_batches(records)
    assert window == pytest.approx(1.006)  # acked (ts_ms) from 100 ms to 1,106 ms
    by_zone = {f.leader_zone: f for f in flows}
    assert (by_zone["az2"].batches_per_s, by_zone["az2"].requests_per_s) == pytest.approx((3 / 1.006, 2 / 1.006))
    assert (by_zone["az3"].batches_per_s, by_zone["az3"].requests_per_s) == pytest.approx((3 / 1.006, 3 / 1.006))


def _note(entries, request, response, status="ok"):
    return {"kind": "notification", "entries": entries, "request_bytes": request, "response_bytes": response,
            "status": status}


def test_notification_sizes_fitted_per_share_and_entry():
    # 1, 2, 3 entries: 328, 401, 474 bytes -> 255 per share + 73 per entry; a failed one is left out
    records = [_note(1, 252, 76), _note(2, 314, 87), _note(3, 376, 98), _note(9, 1, 1, status="failed")]
    assert notify_sizes_from_records(records) == pytest.approx((255.0, 73.0))
    # one entry count only: the default 61 per entry, the share takes the rest of the mean 328
    assert notify_sizes_from_records([_note(1, 254, 76), _note(1, 250, 76)]) == pytest.approx((267.0, 61.0))
    assert notify_sizes_from_records([{"kind": "wal_flush"}]) is None


def test_prefetch_bytes_are_spread_over_the_shares():
    # the three notifications above (255 per share + 73 per entry) and two prefetches of
    # 120 + 30 bytes each: 300 bytes more over 3 shares -> 355 per share, entries unchanged
    records = [_note(1, 252, 76), _note(2, 314, 87), _note(3, 376, 98),
               _note(0, 120, 30, status="prefetch"), _note(0, 120, 30, status="prefetch")]
    assert notify_sizes_from_records(records) == pytest.approx((355.0, 73.0))
    assert notify_sizes_from_records([_note(0, 120, 30, status="prefetch")]) is None  # no share to spread over


def test_applications_per_agent_zone():
    records = [
        {"kind": "wal_flush", "key": "k1", "ts_ms": 1_000, "put_ms": 100.0, "ok": True},
        {"kind": "agent_apply", "zone": "az2", "key": "k2", "ts_ms": 3_000, "status": "ok"},
        {"kind": "agent_apply", "zone": "az2", "key": "k1", "ts_ms": 2_000, "status": "ok"},
        {"kind": "agent_apply", "zone": "az3", "key": "k1", "ts_ms": 1_500, "status": "ok"},
        {"kind": "agent_apply", "zone": "az2", "key": "k3", "ts_ms": 2_500, "status": "failed"},  # not applied
    ]
    assert applies_from_records(records) == {"az2": [2.0, 3.0], "az3": [1.5]}


@pytest.mark.parametrize("applied, settings, count", [
    ([0.0, 0.5, 0.9, 1.2, 3.0], WAL, 3),  # timer 0..1 takes three, 1.2..2.2 one, 3.0 one
    ([0.0, 0.1, 0.2], WalSettings(checkpoint_max_keys=2), 2),  # two keys: at once; the third waits
    ([], WAL, 0),
])
def test_manifests_follow_the_agents_timer(applied, settings, count):
    assert manifests(applied, settings) == count


def _arr(t, host="a"):
    return Arrival(t, host, "az1", "az2", 1000)


def test_replay_checkpoints_from_measured_applications_or_the_seals():
    # host a: 0.0, 0.3, 0.6, 0.9 -> objects sealed 0.25, 0.55, 0.85, 1.15 (one writer, one host)
    arrivals = [_arr(0.0), _arr(0.3), _arr(0.6), _arr(0.9)]
    usage, _ = replay_usage(arrivals, "sidecar", WAL)
    assert (usage.objects, usage.checkpoints) == (4, 1)  # applied at the seals: one timer 0.25..1.25
    measured, _ = replay_usage(arrivals, "sidecar", WAL, applied={"az2": [0.3, 1.4, 1.5, 2.6]})
    assert measured.checkpoints == 3  # 0.3..1.3 | 1.4, 1.5 | 2.6
    assert measured.objects == 4  # the objects are the replay's own either way


def test_notification_sizes_price_the_replay():
    arrivals = [_arr(0.0), _arr(0.1)]  # one object, one share, two entries
    usage, _ = replay_usage(arrivals, "sidecar", WalSettings(policy="wal", notify_bytes_per_share=255,
                                                             notify_bytes_per_entry=73))
    assert usage.crossed_bytes == 255 + 2 * 73


@pytest.mark.parametrize("periods, idle", [
    ([1.0], 0.75),  # one host: it sends again 1 - 0.25 s after the seal
    ([1.0] * 4, 0.25 * (1 - 0.25 ** 4)),  # (P/n)(1 - (W/P)^n) = 0.2490234375
    ([2.0, 1.0], 2 / 3 * (0.75 - 0.75 ** 2 / 4) + 1 / 3 * 0.5),  # by hand: 0.5729166667
    ([0.2], 0.0),  # answered within the linger: the next request is already there
])
def test_closed_loop_idle_after_a_seal(periods, idle):
    from planner.plan import closed_loop_idle_s
    assert closed_loop_idle_s(periods, 0.25) == pytest.approx(idle, rel=1e-4)


def test_a_closed_loop_host_makes_an_object_per_request():
    row = {"host": "h", "zone": "az1", "bytes_per_s": "100000"}
    flows = [flow_from_row({**row, "leader_zone": z}, closed_loop_requests_per_s=closed_loop_requests_per_s(1000))
             for z in ("az2", "az3")]
    assert all(f.closed_loop for f in flows)
    bill = plan_mode(flows, "sidecar", WAL, STANDARD, LIST)
    # one request (both zones) per second, each its own object with both shares; Poisson would say 1/(0.25 + 1)
    assert bill.usage.objects == pytest.approx(1.0)
    assert bill.usage.shares == pytest.approx(2.0)
    gateway = plan_mode([*flows, *(flow_from_row({**row, "host": f"h{i}", "leader_zone": "az2"},
                                                 closed_loop_requests_per_s=1.0) for i in range(3))],
                        "gateway", WAL, STANDARD, LIST)
    # four hosts of period 1 s: 1/(0.25 + 0.2490234375); az2 in every object (every host writes
    # there); az3 only from h: opener (1/4) or h within 0.25 s (1/4): 1 - 3/4 x 3/4
    assert gateway.usage.objects == pytest.approx(1 / (0.25 + 0.2490234375))
    assert gateway.usage.shares == pytest.approx(gateway.usage.objects * (1 + (1 - 0.75 * 0.75)))


def test_break_even_of_a_closed_loop_host():
    from planner.plan import break_even_bytes_per_s
    row = {"host": "h", "zone": "az1", "bytes_per_s": "100000"}
    flows = [flow_from_row({**row, "leader_zone": z}, closed_loop_requests_per_s=closed_loop_requests_per_s(2000))
             for z in ("az2", "az3")]
    # at any rate: a request (both zones, a batch each) every 2 s -> 0.5 objects/s, 1 share/s, manifests
    # 2 x 1/(1 + 2) /s: $(0.5 + 0.666667) x 5e-6 + 1 x 4e-7 + (320 + 61) B x 2e-11 = $6.24095e-6 per s,
    # the transfer of R + 2 x 0.5 x 41 B/s: R = 6.24095e-6 / 2e-11 - 41 = 312,006.7 B/s
    assert break_even_bytes_per_s(flows, WAL, STANDARD, LIST) == pytest.approx(312_006.7, rel=1e-4)


def test_notification_summaries_fit_as_the_round_trips_they_sum():
    # the three notifications of the first test (1, 2, 3 entries: 328, 401, 474 bytes) summed:
    # entries 6, bytes 1,203, entries^2 1 + 4 + 9 = 14, entries x bytes 328 + 802 + 1,422 = 2,552
    summary = {"kind": "notification_summary", "status": "ok", "notifications": 3, "entries": 6,
               "request_bytes": 942, "response_bytes": 261, "entries_squared_sum": 14, "entries_bytes_sum": 2_552}
    assert notify_sizes_from_records([summary]) == pytest.approx((255.0, 73.0))
    # one summed, one single: the same fit
    single = _note(3, 376, 98)
    part = {**summary, "notifications": 2, "entries": 3, "request_bytes": 566, "response_bytes": 163,
            "entries_squared_sum": 5, "entries_bytes_sum": 1_130}
    assert notify_sizes_from_records([part, single]) == pytest.approx((255.0, 73.0))


def test_apply_summaries_are_spread_over_their_span():
    # 3 applies from 1,000 to 3,000 ms: 1, 2 and 3 s; a failed summary is left out
    records = [{"kind": "agent_apply_summary", "zone": "az2", "ts_ms": 10_000, "status": "ok", "applies": 3,
                "first_ts_ms": 1_000, "last_ts_ms": 3_000},
               {"kind": "agent_apply_summary", "zone": "az2", "ts_ms": 10_000, "status": "internal", "applies": 5,
                "first_ts_ms": 1_000, "last_ts_ms": 3_000},
               {"kind": "agent_apply", "zone": "az2", "ts_ms": 2_500, "status": "ok"}]
    assert applies_from_records(records) == {"az2": [1.0, 2.0, 2.5, 3.0]}
