"""The savings planner's model (planner/plan.py), against numbers worked out by hand.

Prices are the list defaults: PUT $0.005/1000, GET $0.0004/1000, $0.01/GB each way, so a
byte across zones costs 2e-11 USD. A month is 730 h = 2,628,000 s.
"""

from __future__ import annotations

import pytest

from core.prices import Prices
from planner.plan import (
    ClassPrices,
    Flow,
    PlanError,
    WalSettings,
    break_even_bytes_per_s,
    checkpoints_per_s,
    host_verdicts,
    plan,
    plan_mode,
    storage_classes,
)
from planner.profile import audited_totals, flow_from_row, flows_from_produce_batches
from planner.shadow import ShadowSplit, shadow_split, without_shadow_direct

LIST = Prices()
STANDARD = ClassPrices("standard", 0.005, 0.0004)
MONTH = 2_628_000
WAL = WalSettings(policy="wal")  # linger 250 ms, max_bytes 8 MiB, checkpoints every 1 s, 1 agent


def test_direct_bills_bytes_plus_produce_overhead_of_cross_zone_flows_only():
    flows = [Flow("h1", "az1", "az2", 1_000_000, 10), Flow("h1", "az1", "az1", 500_000, 5)]
    bill = plan_mode(flows, "direct", WAL, STANDARD, LIST)
    # (1,000,000 + 10 x 41) B/s x 2,628,000 s x 2e-11 $/B = $52.5815496; same-zone is free
    assert bill.transfer_usd == pytest.approx(52.5815496)
    assert bill.s3_request_usd == 0 and bill.s3_put_requests == 0
    assert bill.net_savings_usd == pytest.approx(0)


def test_one_megabyte_per_second_to_one_zone_just_pays():
    flows = [Flow("h1", "az1", "az2", 1_000_000, 10)]
    bill = plan_mode(flows, "sidecar", WAL, STANDARD, LIST)
    # linger-bound: an object every 0.25 s + 1/10 s -> 2.857142857 objects/s, each with an az2 share
    assert bill.usage.objects == pytest.approx(2.857142857)
    assert bill.usage.shares == pytest.approx(2.857142857)
    # one agent: a manifest 1 s after the first share, the next with the share after: 1/(1 + 0.35) /s
    assert bill.usage.checkpoints == pytest.approx(0.740740741)
    # PUTs (2.857142857 + 0.740740741) x 2,628,000 = 9,455,238.1; GETs 7,508,571.4
    assert bill.s3_put_requests == pytest.approx(9_455_238.1)
    assert bill.s3_get_requests == pytest.approx(7_508_571.4)
    # $47.276190 + $3.003429
    assert bill.s3_request_usd == pytest.approx(50.279619, rel=1e-6)
    # notifications: 2.857142857 x 320 + 10 x 61 = 1,524.2857 B/s across -> $0.08011646 a month
    assert bill.transfer_usd == pytest.approx(0.08011646, rel=1e-6)
    assert bill.net_savings_usd == pytest.approx(52.5815496 - 50.279619 - 0.08011646, rel=1e-5)  # $2.22
    assert bill.net_savings_usd > 0


def test_cost_policy_keeps_a_losing_zone_direct():
    flows = [Flow("h1", "az1", "az2", 1_000_000, 10)]
    bill = plan_mode(flows, "sidecar", WalSettings(policy="cost"), STANDARD, LIST)
    assert bill.usage.objects == 0
    assert bill.transfer_usd == pytest.approx(52.5815496)
    assert bill.net_savings_usd == pytest.approx(0)


def test_a_gateway_fills_objects_ten_small_hosts_could_not():
    flows = [Flow(f"h{i}", "az1", "az2", 100_000, 1) for i in range(10)]
    sidecars = plan_mode(flows, "sidecar", WAL, STANDARD, LIST)
    gateway = plan_mode(flows, "gateway", WAL, STANDARD, LIST)
    # each sidecar: an object per 0.25 + 1/1 s = 0.8/s, ten of them 8/s
    assert sidecars.usage.objects == pytest.approx(8.0)
    assert sidecars.writers == 10
    # the gateway sees 1,000,000 B/s in 10 batches/s: 1/(0.25 + 0.1) = 2.857142857/s
    assert gateway.usage.objects == pytest.approx(2.857142857)
    assert gateway.writers == 1
    # shares into az2: 8/s -> manifests 1/(1 + 1/8) = 0.888888889 /s (vs 0.740740741 for the gateway)
    assert sidecars.usage.checkpoints == pytest.approx(0.888888889)
    assert gateway.net_savings_usd > sidecars.net_savings_usd


def test_gateway_writers_per_zone_split_the_zone_traffic():
    flows = [Flow(f"h{i}", "az1", "az2", 100_000, 1) for i in range(10)]
    bill = plan_mode(flows, "gateway", WalSettings(policy="wal", writers_per_zone=2), STANDARD, LIST)
    # two writers of 500,000 B/s in 5 batches/s: 2 x 1/(0.25 + 0.2) = 4.444444444 objects/s
    assert bill.writers == 2
    assert bill.usage.objects == pytest.approx(4.444444444)


def test_share_probability_with_two_destination_zones():
    flows = [Flow("h1", "az1", "az2", 500_000, 5), Flow("h1", "az1", "az3", 500_000, 5)]
    bill = plan_mode(flows, "sidecar", WAL, STANDARD, LIST)
    # 2.857142857 objects/s; each holds az2 unless the opening batch is az3 (1/2) and no az2
    # batch comes within 0.25 s (e^-1.25): 1 - 0.5 x 0.286504797 = 0.856747602 per zone
    assert bill.usage.shares == pytest.approx(2 * 2.857142857 * 0.856747602)


def test_objects_are_size_bound_above_max_bytes_per_linger():
    flows = [Flow("h1", "az1", "az2", 100_000_000, 1000)]
    bill = plan_mode(flows, "sidecar", WAL, STANDARD, LIST)
    # 8 MiB fills in 8,388,608 / 1e8 = 0.08388608 s < 0.25 s: 1/(0.08388608 + 0.001) = 11.7804945/s
    assert bill.usage.objects == pytest.approx(11.7804945)


def test_checkpoints_bounded_by_max_keys_when_busy():
    # 5,000 shares/s into one agent: 5 manifests/s by checkpoint_max_keys 1000, not 1/s
    assert checkpoints_per_s(5_000, WAL) == pytest.approx(5.0)
    # two agents share 10 shares/s: each 1/(1 + 1/5) = 0.833333333 /s
    assert checkpoints_per_s(10, WalSettings(agents_per_zone=2)) == pytest.approx(2 * 0.833333333)
    assert checkpoints_per_s(0, WAL) == 0


def test_express_prices_charge_bytes_written_and_read():
    express = ClassPrices("express", 0.00113, 0.00003, upload_per_gb=0.0032, retrieval_per_gb=0.0006)
    flows = [Flow("h1", "az1", "az2", 1_000_000, 10)]
    bill = plan_mode(flows, "sidecar", WAL, express, LIST)
    # 1e6 B/s x 2,628,000 s = 2,628 GB written and read: 2,628 x (0.0032 + 0.0006) = $9.9864
    assert bill.s3_data_usd == pytest.approx(9.9864)
    # requests: 9,455,238.1 PUTs x 1.13e-6 + 7,508,571.4 GETs x 3e-8 = $10.68442 + $0.22526
    assert bill.s3_request_usd == pytest.approx(10.68442 + 0.22526, rel=1e-5)


def test_plan_lists_direct_then_each_mode_per_class():
    bills = plan([Flow("h1", "az1", "az2", 1, 1)], WAL, LIST)
    assert [(b.mode, b.storage_class) for b in bills] == [
        ("direct", "-"), ("sidecar", "standard"), ("gateway", "standard"), ("sidecar", "express"),
        ("gateway", "express")]
    assert [c.name for c in storage_classes(LIST)] == ["standard", "express"]


def test_break_even_of_a_two_zone_host():
    flows = [Flow("h", "az1", "az2", 100_000, 100_000 / 16384), Flow("h", "az1", "az3", 100_000, 100_000 / 16384)]
    rate = break_even_bytes_per_s(flows, WAL, STANDARD, LIST)
    # the estimate for 16 KiB batches to two zones with 250 ms linger: ~1.6-1.7 MB/s
    assert rate is not None and 1.5e6 < rate < 1.75e6
    below = [Flow("h", "az1", z, rate * 0.45, rate * 0.45 / 16384) for z in ("az2", "az3")]
    above = [Flow("h", "az1", z, rate * 0.55, rate * 0.55 / 16384) for z in ("az2", "az3")]
    assert plan_mode(below, "sidecar", WAL, STANDARD, LIST).net_savings_usd < 0
    assert plan_mode(above, "sidecar", WAL, STANDARD, LIST).net_savings_usd > 0


def test_break_even_none_without_cross_zone_traffic():
    assert break_even_bytes_per_s([Flow("h", "az1", "az1", 1e6, 10)], WAL, STANDARD, LIST) is None


def test_host_verdicts():
    flows = [Flow("small", "az1", "az2", 200_000, 20), Flow("heavy", "az2", "az1", 4_000_000, 250)]
    verdicts = {v.host: v for v in host_verdicts(flows, WAL, STANDARD, LIST)}
    assert not verdicts["small"].sidecar_pays and verdicts["heavy"].sidecar_pays
    assert verdicts["small"].cross_bytes_per_s == 200_000


@pytest.mark.parametrize("row, message", [
    ({"host": "h", "zone": "az1", "leader_zone": "az2", "bytes_per_s": "x"}, "bytes_per_s: 'x' is not a number"),
    ({"host": "h", "zone": "az1", "leader_zone": "az2", "bytes_per_s": "-1"}, "must be a finite number >= 0"),
    ({"host": "", "zone": "az1", "leader_zone": "az2", "bytes_per_s": "1"}, "host: missing"),
    ({"host": "h", "zone": "az1", "leader_zone": "az2", "bytes_per_s": "nan"}, "finite"),
])
def test_bad_csv_rows_are_named(row, message):
    with pytest.raises(PlanError, match=message):
        flow_from_row(row, where="p.csv:3: ")


def test_csv_row_without_batches_uses_the_batch_size():
    flow = flow_from_row({"host": "h", "zone": "az1", "leader_zone": "az2", "bytes_per_s": "32768"}, 16384)
    assert flow.batches_per_s == 2.0
    flow = flow_from_row({"host": "h", "zone": "az1", "leader_zone": "az2", "bytes_per_s": "10",
                          "batches_per_s": "5"})
    assert flow.batches_per_s == 5.0


def _pb(ts, proxy, zone, leader, nbytes, route="wal", error=0, wire=0):
    return {"kind": "produce_batch", "ts_ms": ts, "proxy_id": proxy, "zone": zone, "leader_zone": leader,
            "bytes": nbytes, "route": route, "error_code": error, "wire_bytes": wire}


def test_profile_from_produce_batch_records():
    records = [
        _pb(1_000, "p1", "az1", "az2", 4000), _pb(3_000, "p1", "az1", "az2", 6000),
        _pb(2_000, "p1", "az1", "az1", 1000, route="local"), _pb(2_500, "p2", "az2", "az1", 8000, route="direct_cross"),
        _pb(2_600, "p2", "az2", "az1", 9999, error=6),  # failed: not traffic
        {"kind": "wal_flush", "ts_ms": 9_000},
    ]
    flows, window = flows_from_produce_batches(records)
    assert window == 2.0  # 1,000 .. 3,000 ms
    # no latency_ms: received at ts_ms; every batch more than 5 ms from the next is its own request
    assert flows == [Flow("p1", "az1", "az1", 500, 0.5, 0.5), Flow("p1", "az1", "az2", 5000, 1.0, 1.0),
                     Flow("p2", "az2", "az1", 4000, 0.5, 0.5)]
    with pytest.raises(PlanError):
        flows_from_produce_batches([{"kind": "wal_flush", "ts_ms": 1}])


def test_audited_totals_count_like_the_savings_job():
    records = [
        _pb(0, "p1", "az1", "az2", 4000), _pb(4_000, "p1", "az1", "az2", 6000),
        _pb(1_000, "p1", "az1", "az1", 1000, route="local"),
        _pb(2_000, "p1", "az1", "az3", 3000, route="direct_cross", wire=3100),
        {"kind": "wal_flush", "ts_ms": 5, "put_requests": 2},
        {"kind": "notification", "ts_ms": 6, "request_bytes": 300, "response_bytes": 40},
        {"kind": "agent_read", "ts_ms": 7, "gets": 1},
        {"kind": "checkpoint_write", "ts_ms": 8},
    ]
    a = audited_totals(records)
    assert a.window_s == 4.0
    assert a.direct_equivalent_bytes == 4000 + 6000 + 3000 + 3 * 41
    assert a.crossed_bytes == 3100 + 340
    assert (a.wal_objects, a.put_requests, a.get_requests) == (1, 3, 1)
    transfer, requests, net = a.bill(LIST, STANDARD)
    assert transfer == pytest.approx(3440 * 2e-11)
    assert requests == pytest.approx(3 * 5e-6 + 1 * 4e-7)
    assert net == pytest.approx(13123 * 2e-11 - 3440 * 2e-11 - 3 * 5e-6 - 4e-7)


def _arr(t, nbytes, leader="az2", host="h1", zone="az1"):
    from planner.replay import Arrival
    return Arrival(t, host, zone, leader, nbytes)


def test_replay_writer_seals_at_linger_and_size():
    from planner.replay import replay_writer
    arrivals = [_arr(0.0, 100), _arr(0.1, 100, "az3"), _arr(0.3, 100),  # 0.3 > 0 + 0.25: new object
                _arr(0.31, 900), _arr(0.32, 50)]  # 100 + 900 = 1000 reaches max_bytes: sealed; 50 opens a third
    objects = replay_writer(arrivals, linger_ms=250, max_bytes=1000)
    assert [(o.sealed_s, o.nbytes, o.entries_by_zone) for o in objects] == [
        (0.25, 200, {"az2": 1, "az3": 1}), (0.31, 1000, {"az2": 2}), (0.32 + 0.25, 50, {"az2": 1})]


def test_replay_writer_seals_before_an_entry_that_would_overflow():
    from planner.replay import replay_writer
    objects = replay_writer([_arr(0.0, 600), _arr(0.1, 600)], linger_ms=250, max_bytes=1000)
    assert [(o.sealed_s, o.nbytes) for o in objects] == [(0.1, 600), (0.35, 600)]


def test_replay_writer_counts_what_entries_waited_in_the_producer():
    from planner.replay import Arrival, replay_writer
    arrivals = [Arrival(0.0, "h1", "az1", "az2", 100),  # due 0.25
                Arrival(0.1, "h1", "az1", "az2", 100, waited_s=0.2),  # due 0.1 + 0.25 - 0.2 = 0.15
                Arrival(0.2, "h1", "az1", "az2", 100, waited_s=0.3),  # waited past the linger: sealed on arrival
                Arrival(0.5, "h1", "az1", "az2", 100)]  # opens a third, due 0.75
    objects = replay_writer(arrivals, linger_ms=250, max_bytes=1000)
    assert [o.nbytes for o in objects] == [200, 100, 100]
    assert [o.sealed_s for o in objects] == pytest.approx([0.15, 0.2, 0.75])


def test_arrivals_read_the_producers_wait_from_schema_v8_records():
    from planner.replay import arrivals_from_produce_batches
    base = {"kind": "produce_batch", "error_code": 0, "zone": "az1", "leader_zone": "az2", "proxy_id": "p",
            "bytes": 10, "latency_ms": 0.0}
    got = arrivals_from_produce_batches([{**base, "ts_ms": 1000, "producer_wait_ms": 120.0},
                                         {**base, "ts_ms": 2000},  # before v8: no field
                                         {**base, "ts_ms": 3000, "producer_wait_ms": -1.0}])  # not on the WAL route
    assert [a.waited_s for a in got] == [0.12, 0.0, 0.0]


def test_replay_sidecars_vs_gateway():
    from planner.replay import replay_usage
    # two hosts of az1, each a batch every 0.2 s for 1 s to az2, offset by 0.1 s; and local traffic
    arrivals = sorted([_arr(round(0.2 * i, 3), 1000, host="a") for i in range(5)]
                      + [_arr(round(0.1 + 0.2 * i, 3), 1000, host="b") for i in range(5)]
                      + [_arr(0.05, 5000, leader="az1", host="a")], key=lambda a: a.t_s)
    sidecar, window = replay_usage(arrivals, "sidecar", WalSettings(policy="wal"))
    # host a: 0.0,0.2 | 0.4,0.6 | 0.8 -> 3 objects; host b: 0.1,0.3 | 0.5,0.7 | 0.9 -> 3
    assert (sidecar.objects, sidecar.shares) == (6, 6)
    assert window == pytest.approx(0.9)
    # gateway: 0.0..0.2 | 0.3..0.5 | 0.6..0.8 | 0.9 -> 4 objects
    gateway, _ = replay_usage(arrivals, "gateway", WalSettings(policy="wal"))
    assert (gateway.objects, gateway.shares) == (4, 4)
    # 10 cross-zone batches: (1000 + 41) each; notifications 4 x 320 + 10 x 61
    assert gateway.direct_equivalent_bytes == 10 * 1041
    assert gateway.crossed_bytes == 4 * 320 + 10 * 61
    # objects sealed at 0.25, 0.55, 0.85, 1.15: a manifest timer from 0.25 to 1.25 takes all four
    assert gateway.checkpoints == 1


def test_express_is_planned_once_prices_carry_it():
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class WithExpress(Prices):  # the field names of issue 19's core/prices.py
        express_put_per_1000: float = 0.00113
        express_get_per_1000: float = 0.00003
        express_upload_per_gb: float = 0.0032
        express_retrieval_per_gb: float = 0.0006

    classes = storage_classes(WithExpress())
    assert [c.name for c in classes] == ["standard", "express"]
    assert classes[1] == ClassPrices("express", 0.00113, 0.00003, 0.0032, 0.0006)
    bills = plan([Flow("h1", "az1", "az2", 1_000_000, 10)], WAL, WithExpress())
    assert [(b.mode, b.storage_class) for b in bills] == [
        ("direct", "-"), ("sidecar", "standard"), ("gateway", "standard"), ("sidecar", "express"),
        ("gateway", "express")]


def test_a_shadow_run_is_planned_on_what_the_policy_would_have_sent_through_the_wal():
    def shadow(ts, topic_route, nbytes, leader="az2", route="direct_cross", error=0):
        return {**_pb(ts, "p1", "az1", leader, nbytes, route=route, error=error), "shadow_route": topic_route}
    records = [
        shadow(1_000, "wal", 4000), shadow(2_000, "wal", 6000),
        shadow(1_500, "direct_cross", 7000),         # not piloted: direct either way
        shadow(1_600, "local", 500, leader="az1", route="local"),
        shadow(1_700, "wal", 9999, error=6),         # failed: not traffic
    ]
    assert shadow_split(records) == ShadowSplit(wal_bytes=10_000, direct_bytes=7000)
    kept = list(without_shadow_direct(records))
    assert [r["bytes"] for r in kept] == [4000, 6000, 500, 9999]
    flows, window = flows_from_produce_batches(kept)
    assert window == 1.0  # 1,000 .. 2,000 ms
    assert flows == [Flow("p1", "az1", "az1", 500, 1.0, 1.0), Flow("p1", "az1", "az2", 10_000, 2.0, 2.0)]
    # records without shadow_route (or from before audit v10) are no shadow run
    assert shadow_split([_pb(0, "p1", "az1", "az2", 1), {**_pb(0, "p1", "az1", "az2", 1), "shadow_route": ""}]) is None
