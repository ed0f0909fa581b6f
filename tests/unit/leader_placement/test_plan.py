"""Decision tables for the leader placement planner; every expected number worked out by hand."""

from __future__ import annotations

import json

import pytest

from leader_placement.plan import (
    BELOW_MIN_SAVING,
    LEADER_CAP,
    MAX_MOVES,
    NOT_IN_ISR,
    Constraints,
    Held,
    LeaderPlanError,
    LeaderPrices,
    PartitionPlacement,
    Placement,
    TopicSaving,
    leader_cap,
    plan_leaders,
    reassignment_json,
)

ZONES = {1: "use1-az1", 2: "use1-az2", 3: "use1-az3"}
LIST = LeaderPrices()  # $0.01/GB each way: 2e-11 USD per byte that crosses


def part(topic: str, partition: int, replicas: tuple[int, ...], isr: tuple[int, ...] | None = None,
         leader: int | None = None) -> PartitionPlacement:
    return PartitionPlacement(topic, partition, replicas, replicas[0] if leader is None else leader,
                              replicas if isr is None else isr)


def placement(*parts: PartitionPlacement) -> Placement:
    return Placement(parts, ZONES)


def az(a1: int = 0, a2: int = 0, a3: int = 0) -> dict[str, int]:
    return {z: b for z, b in zip(ZONES.values(), (a1, a2, a3)) if b}


def test_a_skewed_partition_moves_to_its_producers_zone_and_a_uniform_one_stays():
    where = placement(part("t", 0, (2, 3, 1)), part("t", 1, (3, 1, 2)))
    traffic = {("t", 0): az(900, 100), ("t", 1): az(300, 300, 300)}
    plan = plan_leaders(traffic, where, LIST, Constraints(), window_s=10.0)
    [move] = plan.moves
    # led in az2 (100 B from there); az1's 900 B become local, az2's 100 B start crossing: 800 saved
    assert (move.topic, move.partition, move.from_broker, move.from_zone, move.to_broker, move.to_zone) == \
        ("t", 0, 2, "use1-az2", 1, "use1-az1")
    assert move.saving_bytes == 800
    assert move.saving_usd == pytest.approx(800 * 2e-11)
    assert move.replicas_before == (2, 3, 1) and move.replicas_after == (1, 2, 3)
    assert plan.held == ()  # t-1 saves nothing anywhere: not even held
    assert plan.topics == (TopicSaving("t", 1, 800, pytest.approx(1.6e-8)),)
    # 1.6e-8 USD in 10 s; a month of 730 h is 2,628,000 s: x 262,800 = 4.2048e-3 USD
    assert plan.per_month(plan.saving_usd) == pytest.approx(4.2048e-3)
    assert reassignment_json(plan.moves) == {"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [1, 2, 3]}]}
    json.dumps(reassignment_json(plan.moves))  # JSON-able as kafka-reassign-partitions reads it


def test_the_best_of_two_other_zones_wins():
    where = placement(part("t", 0, (2, 3, 1)))
    plan = plan_leaders({("t", 0): az(400, 100, 500)}, where, LIST, Constraints())
    [move] = plan.moves
    assert (move.to_broker, move.saving_bytes, move.replicas_after) == (3, 400, (3, 2, 1))  # 500 - 100


# Six partitions led by brokers 2 and 3, all of their bytes from az1: broker 1 can take
# ceil(6 / 3) + skew of them, the biggest first.
SIX = placement(*(part("t", p, (2, 3, 1) if p % 2 == 0 else (3, 1, 2)) for p in range(6)))
SIX_TRAFFIC = {("t", p): az(600 - 100 * p) for p in range(6)}


@pytest.mark.parametrize(("skew", "cap", "moved"), [
    (0, 2, [0, 1]),
    (1, 3, [0, 1, 2]),
    (4, 6, [0, 1, 2, 3, 4, 5]),
])
def test_the_skew_cap_stops_piling_leaders_onto_one_broker(skew, cap, moved):
    plan = plan_leaders(SIX_TRAFFIC, SIX, LIST, Constraints(skew=skew))
    assert plan.leader_cap == cap == leader_cap(SIX, skew)
    assert [m.partition for m in plan.moves] == moved
    assert all(m.to_broker == 1 for m in plan.moves)
    assert [(h.partition, h.reason, h.saving_bytes) for h in plan.held] == \
        [(p, LEADER_CAP, 600 - 100 * p) for p in range(6) if p not in moved]


def test_a_move_that_frees_a_slot_lets_a_blocked_one_through():
    # cap ceil(3 / 3) + 0 = 1. x (1,000 B from az1) is blocked while broker 1 leads y; y (500 B
    # from az2) moves to broker 2, broker 1 is free, and the next pass moves x.
    where = placement(part("y", 0, (1, 2, 3)), part("x", 0, (3, 1, 2)), part("z", 0, (3, 1, 2)))
    traffic = {("x", 0): az(a1=1000), ("y", 0): az(a2=500)}
    plan = plan_leaders(traffic, where, LIST, Constraints(skew=0))
    assert [(m.topic, m.to_broker) for m in plan.moves] == [("y", 2), ("x", 1)]
    assert plan.held == ()


def test_moves_below_the_minimum_saving_stay():
    where = placement(part("t", 0, (2, 3, 1)), part("t", 1, (3, 1, 2)))
    traffic = {("t", 0): az(900, 100), ("t", 1): az(a1=150, a3=100)}  # savings 800 and 50
    by_bytes = plan_leaders(traffic, where, LIST, Constraints(min_saving_bytes=100))
    assert [m.partition for m in by_bytes.moves] == [0]
    assert by_bytes.held == (Held("t", 1, "use1-az1", 50, BELOW_MIN_SAVING),)
    # USD: 800 B x 2e-11 = 1.6e-8 passes 1e-8; 50 B = 1e-9 does not
    by_usd = plan_leaders(traffic, where, LIST, Constraints(min_saving_usd=1e-8))
    assert [m.partition for m in by_usd.moves] == [0]
    assert [h.reason for h in by_usd.held] == [BELOW_MIN_SAVING]
    both = plan_leaders(traffic, where, LIST, Constraints(min_saving_bytes=50))
    assert [m.partition for m in both.moves] == [0, 1]  # 50 >= 50


def test_the_move_cap_keeps_the_biggest_savings():
    where = placement(part("a", 0, (2, 3, 1)), part("b", 0, (3, 1, 2)), part("c", 0, (2, 3, 1)))
    traffic = {("a", 0): az(a1=300), ("b", 0): az(a1=700), ("c", 0): az(a1=500)}
    plan = plan_leaders(traffic, where, LIST, Constraints(max_moves=2, skew=5))
    assert [(m.topic, m.saving_bytes) for m in plan.moves] == [("b", 700), ("c", 500)]
    assert plan.held == (Held("a", 0, "use1-az1", 300, MAX_MOVES),)
    assert plan_leaders(traffic, where, LIST, Constraints(max_moves=0)).moves == ()


def test_a_replica_out_of_the_isr_is_not_made_leader_and_the_partition_waits_for_it():
    # broker 1 (az1, 900 B) is out of the ISR: no move to it, nor to az3 (200 B, second best)
    where = placement(part("t", 0, (2, 3, 1), isr=(2, 3)))
    plan = plan_leaders({("t", 0): az(900, 100, 200)}, where, LIST, Constraints())
    assert plan.moves == ()
    assert plan.held == (Held("t", 0, "use1-az1", 800, NOT_IN_ISR),)
    # when the out-of-ISR replica's zone is not the best, the best in-ISR one is taken
    plan = plan_leaders({("t", 0): az(150, 100, 900)}, where, LIST, Constraints())
    assert [(m.to_broker, m.saving_bytes) for m in plan.moves] == [(3, 800)]


def test_per_topic_savings_and_the_reassignment_file_in_plan_order():
    where = placement(part("a", 0, (2, 3, 1)), part("a", 1, (3, 1, 2)), part("b", 0, (1, 2, 3)))
    traffic = {("a", 0): az(a1=1000), ("a", 1): az(a1=400, a3=100), ("b", 0): az(a1=100, a2=700)}
    plan = plan_leaders(traffic, where, LIST, Constraints(skew=5))
    assert [(m.topic, m.partition, m.saving_bytes) for m in plan.moves] == [("a", 0, 1000), ("b", 0, 600),
                                                                           ("a", 1, 300)]
    assert plan.topics == (TopicSaving("a", 2, 1300, pytest.approx(2.6e-8)),
                           TopicSaving("b", 1, 600, pytest.approx(1.2e-8)))
    assert plan.saving_bytes == 1900
    assert reassignment_json(plan.moves)["partitions"] == [
        {"topic": "a", "partition": 0, "replicas": [1, 2, 3]},
        {"topic": "b", "partition": 0, "replicas": [2, 1, 3]},
        {"topic": "a", "partition": 1, "replicas": [1, 3, 2]},
    ]


def test_partitions_without_traffic_or_leader_stay():
    where = placement(part("t", 0, (2, 3, 1), leader=-1, isr=()), part("t", 1, (2, 3, 1)))
    plan = plan_leaders({("t", 0): az(a1=1000)}, where, LIST, Constraints())
    assert plan.moves == () and plan.held == ()
    assert plan.leader_cap == 1 + 1  # one led partition over three brokers, + skew 1


def test_the_wal_share_is_priced_at_the_wal_cost():
    # half the audited cross-zone bytes went direct (2e-11), half by the WAL (4e-12): 1.2e-11 a byte
    prices = LeaderPrices(direct_usd_per_byte=2e-11, wal_usd_per_byte=4e-12, wal_share=0.5)
    assert prices.usd_per_cross_byte == pytest.approx(1.2e-11)
    plan = plan_leaders({("t", 0): az(a1=1000)}, placement(part("t", 0, (2, 3, 1))), prices, Constraints())
    assert plan.moves[0].saving_usd == pytest.approx(1.2e-8)


def test_bad_input_is_refused():
    with pytest.raises(LeaderPlanError, match="leader 4 is not a replica"):
        plan_leaders({}, placement(part("t", 0, (1, 2, 3), leader=4)), LIST, Constraints())
    with pytest.raises(LeaderPlanError):
        Constraints(skew=-1)
    with pytest.raises(LeaderPlanError):
        LeaderPrices(wal_share=1.5)


# Consumer bytes: what the leader served to consumers per consumer zone (fetch_bytes with
# from_leader). A leader in zone L costs the bytes of consumers outside L.

def test_consumers_alone_move_a_leader_to_their_zone():
    where = placement(part("t", 0, (2, 3, 1)))
    plan = plan_leaders({}, where, LIST, Constraints(), fetch_traffic={("t", 0): az(900, 100)})
    [move] = plan.moves
    # led in az2: az1's 900 B stop crossing, az2's 100 B start: 800 saved, all of it consumer bytes
    assert (move.to_broker, move.saving_bytes, move.fetch_saving_bytes, move.produce_saving_bytes) == (1, 800, 800, 0)
    assert move.saving_usd == pytest.approx(800 * 2e-11)
    assert plan.fetch_saving_bytes == 800
    assert plan.topics == (TopicSaving("t", 1, 800, pytest.approx(1.6e-8), 800),)


def test_produce_and_consumer_bytes_add_up_and_the_bigger_pull_wins():
    where = placement(part("t", 0, (2, 3, 1)))
    # producers in az1 (1,000 B), consumers of the leader in az3 (1,500 B), nothing in az2 where it is led
    plan = plan_leaders({("t", 0): az(1000)}, where, LIST, Constraints(), fetch_traffic={("t", 0): az(0, 0, 1500)})
    [move] = plan.moves
    assert (move.to_zone, move.saving_bytes, move.fetch_saving_bytes) == ("use1-az3", 1500, 1500)  # az1 saves 1,000
    assert move.saving_usd == pytest.approx(1500 * 2e-11)


def test_a_produce_byte_on_the_wal_route_may_cost_more_than_a_fetched_one_and_the_dollars_decide():
    where = placement(part("t", 0, (2, 3, 1)))
    # every cross-zone produce byte went through the WAL at 1e-10 USD; a fetched byte is transfer, 2e-11
    wal = LeaderPrices(wal_usd_per_byte=1e-10, wal_share=1.0)
    plan = plan_leaders({("t", 0): az(1000)}, where, wal, Constraints(), fetch_traffic={("t", 0): az(0, 0, 1500)})
    [move] = plan.moves
    # az1: 1,000 x 1e-10 = 1e-7 USD; az3: 1,500 x 2e-11 = 3e-8 USD: az1 although fewer bytes
    assert (move.to_zone, move.saving_bytes, move.fetch_saving_bytes) == ("use1-az1", 1000, 0)
    assert move.saving_usd == pytest.approx(1e-7)


def test_consumers_in_the_leaders_zone_count_against_a_move():
    where = placement(part("t", 0, (2, 3, 1)), part("t", 1, (2, 3, 1)))
    traffic = {("t", 0): az(500), ("t", 1): az(500)}
    # t-0: 300 B fetched from the leader in az2 would start crossing: 500 - 300 = 200 saved
    # t-1: 600 B there: 500 - 600 < 0, it stays (and is not held: it would save nothing)
    fetches = {("t", 0): az(0, 300), ("t", 1): az(0, 600)}
    plan = plan_leaders(traffic, where, LIST, Constraints(), fetch_traffic=fetches)
    [move] = plan.moves
    assert (move.partition, move.to_zone, move.saving_bytes, move.fetch_saving_bytes, move.produce_saving_bytes) \
        == (0, "use1-az1", 200, -300, 500)
    assert move.saving_usd == pytest.approx(200 * 2e-11)
    assert plan.held == ()


def test_consumer_bytes_of_a_replica_out_of_the_isr_hold_the_partition():
    where = placement(part("t", 0, (2, 3, 1), isr=(2, 1)))
    # producers in az1 save 400 by a move to broker 1 (in the ISR); consumers in az3 would save
    # 700 at broker 3, out of the ISR: the partition waits for broker 3
    plan = plan_leaders({("t", 0): az(400)}, where, LIST, Constraints(), fetch_traffic={("t", 0): az(0, 0, 700)})
    assert plan.moves == ()
    assert plan.held == (Held("t", 0, "use1-az3", 700, NOT_IN_ISR),)
