"""notify.agent_ownership = "leader": a broker's partitions to one agent; the recorded layout."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from azsidecar.config import load_config
from core.configload import ConfigError
from leader_notify.sender.owners import AgentMap, leader_owner_index, owner_index
from wal_s3.agent_shares import encode_share_entries, parse_share_entries, share_index, share_runs

A = ("10.0.1.5:9400", "10.0.1.6:9400", "10.0.1.7:9400")


@pytest.mark.parametrize(("count", "leader", "zone_leaders", "owner"), [
    (3, 4, [1, 4, 7], 1),
    (3, 7, [1, 4, 7], 2),
    (2, 7, [1, 4, 7], 0),  # rank 2 mod 2
    (2, 10, [1, 4, 7, 10], 1),
    (1, 7, [1, 4, 7], 0),
    (3, 1, [1], 0),
])
def test_a_broker_goes_to_its_rank_mod_the_agents(count, leader, zone_leaders, owner):
    assert leader_owner_index(count, leader, zone_leaders) == owner


def test_an_unknown_leader_or_no_agent_is_an_error():
    with pytest.raises(ValueError, match="not among"):
        leader_owner_index(3, 5, [1, 4, 7])
    with pytest.raises(ValueError, match="at least one agent"):
        leader_owner_index(0, 1, [1])


def test_every_partition_of_a_broker_has_one_owner():
    m = AgentMap({"az2": A}, "leader")
    leaders = {p: (1, 4, 7)[p % 3] for p in range(12)}  # brokers 1, 4, 7 lead in az2
    for p, leader in leaders.items():
        m.note_leader("az2", "orders", p, leader)
    assert [m.owner("az2", "orders", p) for p in range(12)] == [0, 1, 2] * 4
    assert [m.share_of("az2", "orders", p) for p in range(3)] == ["az2.1of3", "az2.2of3", "az2.3of3"]


def test_ownership_follows_the_leader_and_reports_changes():
    m = AgentMap({"az2": A[:2]}, "leader")
    assert m.note_leader("az2", "t", 0, 4) is True  # a first leader: a new broker of the zone
    assert m.owner("az2", "t", 0) == 0  # brokers [4]: rank 0
    assert m.note_leader("az2", "t", 0, 4) is False  # nothing changed
    assert m.note_leader("az2", "t", 1, 7) is True  # broker 7 is new: ranks [4, 7]
    assert (m.owner("az2", "t", 0), m.owner("az2", "t", 1)) == (0, 1)
    assert m.note_leader("az2", "t", 1, 1) is True  # broker 1 leads: [1, 4, 7] shifts every rank
    assert (m.owner("az2", "t", 0), m.owner("az2", "t", 1)) == (1, 0)  # 4 has rank 1, 1 has rank 0
    assert m.note_leader("az2", "t", 0, 7) is True  # t-0's leader moved to broker 7 (rank 2 -> agent 0)
    assert m.owner("az2", "t", 0) == 0


def test_a_partition_without_a_known_leader_is_hashed():
    m = AgentMap({"az2": A}, "leader")
    assert [m.owner("az2", "orders", p) for p in range(12)] == [owner_index(A, "orders", p) for p in range(12)]
    assert [m.owner("az2", "orders", p) for p in range(4)] == [2, 0, 2, 0]  # test_owners.py's pinned table


def test_partition_ownership_ignores_leaders_and_one_agent_zones_need_none():
    hashed = AgentMap({"az2": A}, "partition")
    assert hashed.note_leader("az2", "orders", 0, 4) is False
    assert hashed.owner("az2", "orders", 0) == 2  # as pinned in test_owners.py
    single = AgentMap({"az1": "h:1"}, "leader")
    assert single.note_leader("az1", "orders", 0, 4) is False and single.owner("az1", "orders", 0) == 0


def test_ownership_is_validated():
    with pytest.raises(ValueError, match="ownership"):
        AgentMap({"az2": A}, "broker")
    with pytest.raises(ConfigError, match="notify.agent_ownership"):
        load_config(None, {"notify.agent_ownership": "broker"})
    assert load_config(None, {}).notify.agent_ownership == "leader"


@dataclass
class _E:
    topic: str
    partition: int


@dataclass
class _Share:
    entries: list


@dataclass
class _Obj:
    zones: dict
    share_runs: dict = field(default_factory=dict)


def test_runs_are_the_recorded_layout_not_todays_owners():
    m = AgentMap({"az2": A}, "leader")
    entries = [_E("t", 0), _E("t", 0), _E("t", 1)]
    # written when t-0 was led by agent 2's broker and t-1 by agent 0's; today both hash elsewhere
    recorded = _Obj({"az2": _Share(entries)}, {"az2": ((0, 0, 2), (2, 2, 3))})
    assert list(m.runs(recorded, "az2")) == [(0, 0, 2), (2, 2, 3)]
    unrecorded = _Obj({"az2": _Share(entries)})
    assert m.runs(unrecorded, "az2") == m.slices("az2", entries)


@pytest.mark.parametrize(("name", "index"), [("az2", 0), ("az2.1of3", 0), ("az2.3of3", 2), ("z.4of3", 0)])
def test_share_index(name, index):
    assert share_index(name) == index


def test_share_entries_metadata_round_trip():
    assert share_runs(["az2.1of3", "az2.3of3"], [2, 5]) == ((0, 0, 2), (2, 2, 7))
    assert encode_share_entries([3, 2, 5]) == "3,2,5"
    assert parse_share_entries("az1,az2.1of3,az2.3of3", "3,2,5") == {
        "az1": ((0, 0, 3),), "az2": ((0, 0, 2), (2, 2, 7))}
    with pytest.raises(ValueError, match="does not match"):
        parse_share_entries("az1,az2.1of3", "3")
    with pytest.raises(ValueError):
        parse_share_entries("az1", "x")
