"""Owners of partitions among a zone's agents (rendezvous hashing), and share names."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pytest

from azsidecar.config import load_config
from core.configload import ConfigError
from leader_notify.sender.owners import AgentMap, agent_lists, health_key, owner_index, probe_targets, score
from wal_s3.agent_shares import share_name, zone_of_share

A = ("10.0.1.5:9400", "10.0.1.6:9400", "10.0.1.7:9400")


def test_score_is_the_documented_blake2b():
    expected = hashlib.blake2b(b"10.0.1.5:9400\x00orders\x000", digest_size=8).digest()
    assert score("10.0.1.5:9400", "orders", 0) == int.from_bytes(expected, "big") == 0xB928C900F465530D


# Pinned: a change here moves partitions between agents in every deployment (docs/routing.md).
@pytest.mark.parametrize(("agents", "owners"), [
    (A, [2, 0, 2, 0, 1, 0, 2, 1, 2, 2, 0, 0]),
    (A[:2], [0, 0, 1, 0, 1, 0, 0, 1, 1, 1, 0, 0]),
    (A[:1], [0] * 12),
])
def test_owners_of_orders_0_to_11(agents, owners):
    assert [owner_index(agents, "orders", p) for p in range(12)] == owners


def test_removing_an_agent_moves_only_its_partitions_and_adding_one_only_takes():
    for topic in ("orders", "payments", "t"):
        for p in range(200):
            with3 = A[owner_index(A, topic, p)]
            with2 = A[owner_index(A[:2], topic, p)]
            if with3 != A[2]:
                assert with2 == with3, (topic, p)  # not the removed agent's: stays put


def test_owner_does_not_depend_on_list_order_and_spreads():
    reordered = (A[2], A[0], A[1])
    counts = {a: 0 for a in A}
    for p in range(3000):
        owner = A[owner_index(A, "orders", p)]
        assert reordered[owner_index(reordered, "orders", p)] == owner
        counts[owner] += 1
    assert all(800 < c < 1200 for c in counts.values()), counts  # ~1000 each


def test_no_agents_is_an_error():
    with pytest.raises(ValueError):
        owner_index((), "t", 0)


@dataclass
class E:
    topic: str
    partition: int


def test_agent_lists_and_slices():
    m = AgentMap({"az1": "h:1", "az2": list(A)})
    assert agent_lists({"az1": "h:1", "az2": A}) == {"az1": ("h:1",), "az2": A}
    assert m.agents("az1") == ("h:1",) and m.count("az2") == 3 and m.count("az9") == 0
    # orders-1 and -3 belong to agent 0, orders-4 to 1, orders-0 and -2 to 2 (table above).
    laid_out = [E("orders", 1), E("orders", 3), E("orders", 1), E("orders", 4), E("orders", 0), E("orders", 2)]
    assert m.slices("az2", laid_out) == [(0, 0, 3), (1, 3, 4), (2, 4, 6)]
    assert m.slices("az1", laid_out) == [(0, 0, 6)]
    assert m.slices("az2", []) == []
    with pytest.raises(ValueError, match="not contiguous"):
        m.slices("az2", [E("orders", 1), E("orders", 4), E("orders", 3)])
    assert [m.share_of("az2", "orders", p) for p in (1, 4, 0)] == ["az2.1of3", "az2.2of3", "az2.3of3"]
    assert m.share_of("az1", "orders", 1) == "az1"


@pytest.mark.parametrize(("zone", "index", "count", "name"), [
    ("use1-az2", 0, 1, "use1-az2"),
    ("use1-az2", 0, 3, "use1-az2.1of3"),
    ("use1-az2", 2, 3, "use1-az2.3of3"),
    ("a.b", 1, 2, "a.b.2of2"),
])
def test_share_names_round_trip(zone, index, count, name):
    assert share_name(zone, index, count) == name
    assert zone_of_share(name) == zone


def test_share_name_edges():
    with pytest.raises(ValueError):
        share_name("z", 3, 3)
    assert zone_of_share("z.4of3") == "z.4of3"  # not a share name: a zone's own name
    assert zone_of_share("z.0of3") == "z.0of3"


@pytest.mark.parametrize(("agents", "problem"), [
    ({"az2": []}, "1..64 agent addresses"),
    ({"az2": ["h:1", "h:1"]}, "listed twice"),
    ({"az2": ["h:1", "nohost"]}, "not host:port"),
    ({"az2": "h:0"}, "not host:port"),
])
def test_notify_agents_validation(agents, problem):
    with pytest.raises(ConfigError, match=problem):
        load_config(None, {"notify.agents": agents})


def test_notify_agents_single_address_and_list_forms():
    config = load_config(None, {"notify.agents": {"az1": "h:1", "az2": ["a:1", "b:2"]}, "wal.bucket": "acme-wal",
                                "wal.region": "us-east-1"})
    assert agent_lists(config.notify.agents) == {"az1": ("h:1",), "az2": ("a:1", "b:2")}


def test_probe_targets_are_keyed_like_the_circuits():
    agents = {"az1": "h:1", "az2": ["a:1", "b:2"], "az3": ["c:3"]}
    assert probe_targets(agents, skip_zone="az1") == {"az2/a:1": "a:1", "az2/b:2": "b:2", "az3": "c:3"}
    assert health_key("az2", ("a:1", "b:2"), 1) == "az2/b:2" and health_key("az3", ("c:3",), 0) == "az3"
