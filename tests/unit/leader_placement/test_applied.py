"""Earlier applies from hand-made leader_move records, and the placements since undone."""

from __future__ import annotations

from core.audit import MemoryAuditSink
from leader_placement.applied import AppliedMove, AppliedMoves, Undone, leader_move_fields, undone
from leader_placement.plan import Move, PartitionPlacement

ZONES = {1: "use1-az1", 2: "use1-az2", 3: "use1-az3"}
T0 = 1_795_654_800_000  # 2026-11-26T01:00:00Z


def record(partition, to_broker, ts_ms, plan_id="p1", topic="orders", from_broker=2):
    return {"schema_version": 12, "kind": "leader_move", "ts_ms": ts_ms, "zone": "use1-az1", "topic": topic,
            "partition": partition, "from_broker": from_broker, "from_zone": ZONES[from_broker],
            "to_broker": to_broker, "to_zone": ZONES[to_broker], "plan_id": plan_id}


def led(partition, leader, topic="orders"):
    return PartitionPlacement(topic, partition, (1, 2, 3), leader, (1, 2, 3))


def test_the_record_of_a_move_is_a_valid_leader_move():
    move = Move("orders", 0, 2, "use1-az2", 1, "use1-az1", 8_000_000, 1.6e-4, (2, 3, 1), (1, 2, 3))
    sink = MemoryAuditSink()  # refuses a kind core/audit.py does not define
    sink.emit("leader_move", leader_move_fields(move, "20261126T010000Z-0123abcd"))
    assert sink.of("leader_move") == [{"topic": "orders", "partition": 0, "from_broker": 2, "from_zone": "use1-az2",
                                       "to_broker": 1, "to_zone": "use1-az1", "plan_id": "20261126T010000Z-0123abcd"}]


def test_the_records_pass_through_and_each_partitions_latest_move_is_kept():
    produce = {"kind": "produce_batch", "ts_ms": T0, "topic": "orders", "partition": 0, "bytes": 10}
    records = [produce, record(0, 1, T0 + 1_000), record(0, 3, T0 + 9_000, "p2"), record(1, 1, T0 + 2_000),
               record(2, 1, T0 + 2_000, "p1"), record(2, 3, T0 + 2_000, "p0"),  # same ms: the later plan id wins
               {"kind": "leader_move", "ts_ms": T0, "topic": "", "partition": 5, "to_broker": 1}]  # names nothing
    applied = AppliedMoves()
    assert list(applied.watch(records)) == records
    assert applied.latest == {
        ("orders", 0): AppliedMove("orders", 0, 2, "use1-az2", 3, "use1-az3", "p2", T0 + 9_000),
        ("orders", 1): AppliedMove("orders", 1, 2, "use1-az2", 1, "use1-az1", "p1", T0 + 2_000),
        ("orders", 2): AppliedMove("orders", 2, 2, "use1-az2", 1, "use1-az1", "p1", T0 + 2_000),
    }


def test_a_partition_led_elsewhere_than_its_move_made_it_is_undone_with_when_it_was_applied():
    applied = AppliedMoves()
    list(applied.watch([record(0, 1, T0), record(1, 1, T0 + 1_000), record(2, 1, T0 + 2_000),
                        record(3, 1, T0 + 3_000)]))
    now = {("orders", 0): led(0, 1),  # still where the apply put it
           ("orders", 1): led(1, 2),  # broker 1 failed, broker 2 took over
           ("orders", 3): led(3, -1)}  # offline; orders-2 was deleted
    assert undone(applied.latest, now, ZONES) == (
        Undone(AppliedMove("orders", 1, 2, "use1-az2", 1, "use1-az1", "p1", T0 + 1_000), 2, "use1-az2"),
        Undone(AppliedMove("orders", 2, 2, "use1-az2", 1, "use1-az1", "p1", T0 + 2_000), None, ""),
        Undone(AppliedMove("orders", 3, 2, "use1-az2", 1, "use1-az1", "p1", T0 + 3_000), -1, ""),
    )


def test_no_records_nothing_undone():
    applied = AppliedMoves()
    list(applied.watch([{"kind": "produce_batch", "ts_ms": T0}]))
    assert applied.latest == {} and undone(applied.latest, {}, ZONES) == ()
