"""bench/bench_agent.py: the WAL layout agrees with the sender's owners (pure parts).

Twelve entries, entry i of partition i % 6 of "orders"; expected layouts (entry indices)
and runs written by hand from the owners: "leader" from the leader ids below (node ids
4, 7, 9 rank 0, 1, 2; broker of rank r to agent r mod n), "partition" from the pinned
hashing owners of orders-0..5 (tests/unit/leader_notify/test_owners.py).
"""

from __future__ import annotations

import pytest

from azsidecar.config import load_config
from bench.bench_agent import (
    KEYS,
    ZONE,
    Flushed,
    announcements,
    in_turn,
    lay_out,
    log_ends,
    note_leaders,
    partitions_per_agent,
    round_robin_leaders,
    wrong_ends,
)
from core.audit import NullAuditSink
from leader_notify.sender.owners import AgentMap
from leader_notify.sender.sender import NotifySender
from wal_s3.format import EntryRef, WalEntry, ZoneShare

ADDRESSES = ("10.0.1.5:9400", "10.0.1.6:9400", "10.0.1.7:9400")
TOPIC = "orders"
LEADERS = {0: 7, 1: 9, 2: 4, 3: 7, 4: 9, 5: 4}  # three brokers, node ids not 1..3
ONE_BROKER = {p: 1 for p in range(6)}  # Tansu: one broker leads everything
ENTRIES = [WalEntry(TOPIC, i % 6, -1, -1, -1, 1, bytes([i])) for i in range(12)]


def sender_for(agents: int, ownership: str) -> NotifySender:
    config = load_config(None, {"wal.bucket": "b", "wal.region": "us-east-1", "notify.hmac_keys": list(KEYS),
                                "notify.agents": {ZONE: list(ADDRESSES[:agents])},
                                "notify.agent_ownership": ownership})
    return NotifySender(config.notify, "az1", "bench", 1, NullAuditSink(), bucket="b")


@pytest.mark.parametrize(("ownership", "agents", "leaders", "order", "runs"), [
    # leader, owners by partition [1, 0, 0, 1, 0, 0] (ranks 1, 2, 0, 1, 2, 0 mod 2)
    ("leader", 1, LEADERS, list(range(12)), [(0, 0, 12)]),
    ("leader", 2, LEADERS, [1, 2, 4, 5, 7, 8, 10, 11, 0, 3, 6, 9], [(0, 0, 8), (1, 8, 12)]),
    # leader, owners [1, 2, 0, 1, 2, 0]
    ("leader", 3, LEADERS, [2, 5, 8, 11, 0, 3, 6, 9, 1, 4, 7, 10], [(0, 0, 4), (1, 4, 8), (2, 8, 12)]),
    # leader, one broker: agent 0 takes all, the others stand by
    ("leader", 3, ONE_BROKER, list(range(12)), [(0, 0, 12)]),
    ("partition", 1, LEADERS, list(range(12)), [(0, 0, 12)]),
    # partition, owners [0, 0, 1, 0, 1, 0]
    ("partition", 2, LEADERS, [0, 1, 3, 5, 6, 7, 9, 11, 2, 4, 8, 10], [(0, 0, 8), (1, 8, 12)]),
    # partition, owners [2, 0, 2, 0, 1, 0]: the leaders change nothing
    ("partition", 3, LEADERS, [1, 3, 5, 7, 9, 11, 4, 10, 0, 2, 6, 8], [(0, 0, 6), (1, 6, 8), (2, 8, 12)]),
    ("partition", 3, ONE_BROKER, [1, 3, 5, 7, 9, 11, 4, 10, 0, 2, 6, 8], [(0, 0, 6), (1, 6, 8), (2, 8, 12)]),
])
def test_layout_is_what_the_senders_agent_map_slices(ownership, agents, leaders, order, runs):
    layout = AgentMap({ZONE: list(ADDRESSES[:agents])}, ownership)
    note_leaders(layout, TOPIC, leaders)
    laid_out = lay_out(ENTRIES, layout)
    assert [e.batch[0] for e in laid_out] == order

    sender = sender_for(agents, ownership)
    note_leaders(sender.agents, TOPIC, leaders)
    assert sender.agents.slices(ZONE, laid_out) == runs


def test_a_sender_not_told_the_leaders_hashes_and_refuses_the_leader_layout():
    layout = AgentMap({ZONE: list(ADDRESSES)}, "leader")
    note_leaders(layout, TOPIC, LEADERS)
    laid_out = lay_out(ENTRIES, layout)  # partitions 2 5 2 5 | 0 3 0 3 | 1 4 1 4
    # hashed owners of those: 2 0 2 0 | 2 0 2 0 | 0 1 0 1: agent 2's entries split
    with pytest.raises(ValueError, match="not contiguous"):
        sender_for(3, "leader").agents.slices(ZONE, laid_out)


@pytest.mark.parametrize(("partitions", "brokers", "leaders"), [
    (5, 3, {0: 1, 1: 2, 2: 3, 3: 1, 4: 2}),
    (4, 2, {0: 1, 1: 2, 2: 1, 3: 2}),
    (2, 1, {0: 1, 1: 1}),
])
def test_round_robin_leaders(partitions, brokers, leaders):
    assert round_robin_leaders(partitions, brokers) == leaders


@pytest.mark.parametrize(("ownership", "agents", "leaders", "counts"), [
    ("leader", 3, LEADERS, [2, 2, 2]),
    ("leader", 2, LEADERS, [4, 2]),  # owners [1, 0, 0, 1, 0, 0]
    ("leader", 3, ONE_BROKER, [6, 0, 0]),
    ("partition", 3, LEADERS, [3, 1, 2]),  # owners [2, 0, 2, 0, 1, 0]
    ("partition", 1, LEADERS, [6]),
])
def test_partitions_per_agent(ownership, agents, leaders, counts):
    agent_map = AgentMap({ZONE: list(ADDRESSES[:agents])}, ownership)
    note_leaders(agent_map, TOPIC, leaders)
    assert partitions_per_agent(agent_map, TOPIC, 6) == counts


def test_log_ends():
    batches = [(0, [b"a", b"b"], b""), (1, [b"c"], b""), (0, [b"d", b"e", b"f"], b"")]
    assert log_ends(batches) == {0: (5, 3), 1: (1, 1)}


@pytest.mark.parametrize(("got", "base_plus_one", "wrong"), [
    ({0: 5, 1: 1}, False, {}),
    ({0: 3, 1: 1}, False, {0: 3}),  # the last batch's base + 1: wrong on Kafka
    ({0: 3, 1: 1}, True, {}),  # Tansu's answer
    ({0: 8, 1: 1}, True, {0: 8}),  # the last batch appended twice
    ({0: 1, 1: 1}, True, {0: 1}),  # the last batch missing (Tansu: the first batch's base + 1)
    ({0: 5}, False, {1: -1}),  # a partition with no answer
])
def test_wrong_ends(got, base_plus_one, wrong):
    assert wrong_ends(got, {0: (5, 3), 1: (1, 1)}, base_plus_one) == wrong


# --- announcements: when each share is announced (pacing by hand) ---------------------------
#
# Two objects; object A's zone share is 3 MiB in three 1 MiB entries, B's 2 MiB in two.
# Owners by hand: A's entries 0-1 go to agent 0, entry 2 to agent 1; B's single run to agent 1.

MIB = 1024 * 1024


def _object(key: str, entries: int) -> Flushed:
    refs = tuple(EntryRef(TOPIC, i, i * MIB, MIB, 0, 1, -1, -1, -1) for i in range(entries))
    return Flushed(key, {ZONE: ZoneShare(0, entries * MIB, refs)})


OBJ_A, OBJ_B = _object("a", 3), _object("b", 2)
RUNS = {3: [(0, 0, 2), (1, 2, 3)], 2: [(1, 0, 2)]}  # by entry count: A has 3, B has 2


def _slices(entries):
    return RUNS[len(entries)]


def _schedule(offered_mib_s: float, stagger: bool) -> list[tuple[float, str, int, int, int]]:
    return [(due, obj.key, agent, first, end)
            for due, obj, agent, first, end in announcements([OBJ_A, OBJ_B], _slices, offered_mib_s, stagger)]


def test_unpaced_announces_everything_at_once():
    assert _schedule(0, False) == [(0.0, "a", 0, 0, 2), (0.0, "a", 1, 2, 3), (0.0, "b", 1, 0, 2)]


def test_paced_objects_wait_for_the_bytes_before_them():
    # 1 MiB/s: B is due once A's 3 MiB are offered; both of A's shares at once.
    assert _schedule(1, False) == [(0.0, "a", 0, 0, 2), (0.0, "a", 1, 2, 3), (3.0, "b", 1, 0, 2)]


def test_staggered_shares_wait_for_the_shares_before_them():
    # 2 MiB/s: A's second share after A's first 2 MiB (1 s), B after all of A's 3 MiB (1.5 s).
    assert _schedule(2, True) == [(0.0, "a", 0, 0, 2), (1.0, "a", 1, 2, 3), (1.5, "b", 1, 0, 2)]


def test_one_at_a_time_gives_each_agent_all_its_shares_in_turn():
    # Unpaced: agent 0 has A's first share only; agent 1 A's second and B's, in object order.
    turns = [[(due, obj.key, agent, first, end) for due, obj, agent, first, end in turn]
             for turn in in_turn(announcements([OBJ_A, OBJ_B], _slices, 0, False))]
    assert turns == [[(0.0, "a", 0, 0, 2)], [(0.0, "a", 1, 2, 3), (0.0, "b", 1, 0, 2)]]


def test_stamped_batches_are_one_idempotent_producers_with_valid_crcs():
    from kafka.record.default_records import DefaultRecordBatch

    from bench.bench_agent import build_batches, stamp_idempotent

    batches = build_batches(1, 16, 2)[:4]  # partitions 0, 1, 0, 1
    per_batch = len(batches[0][1])
    stamped = stamp_idempotent(batches, 4242, 3)
    assert [(p, seq) for p, _v, _raw, seq in stamped] == [(0, 0), (1, 0), (0, per_batch), (1, per_batch)]
    for (_p, values, raw, seq), (_p0, _v0, original) in zip(stamped, batches, strict=True):
        batch = DefaultRecordBatch(raw)
        assert batch.validate_crc()
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (4242, 3, seq)
        assert [r.value for r in batch] == values
        assert raw[61:] == original[61:]  # the records untouched
