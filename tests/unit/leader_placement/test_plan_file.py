"""The saved plan (leader_placement/plan_file.py): what a dry run writes and `--apply --plan` reads back."""

from __future__ import annotations

import copy
import json

import pytest

from leader_placement.plan import Move, reassignment_json
from leader_placement.plan_file import (
    PlanFileError,
    SavedPlan,
    make_plan_id,
    other_cluster,
    parse_plan,
    plan_document,
)

CREATED_MS = 1_795_654_800_000  # 2026-11-26T01:00:00Z
MOVES = (Move("orders", 0, 2, "use1-az2", 1, "use1-az1", 8_000_000, 1.6e-4, (2, 3, 1), (1, 2, 3)),
         Move("orders", 1, 3, "use1-az3", 1, "use1-az1", 7_000_000, 1.4e-4, (3, 1, 2), (1, 3, 2), 2_000_000))
PLAN = SavedPlan("20261126T010000Z-0123abcd", CREATED_MS, "kRaFt-cluster-1", ("b-1:9092", "b-2:9092"), 60.0, MOVES)


def test_the_document_holds_every_move_with_the_leader_and_replica_order_it_saw():
    doc = plan_document(PLAN)
    assert doc == {
        "format": "azsidecar-leader-plan", "version": 1, "plan_id": "20261126T010000Z-0123abcd",
        "created_ms": CREATED_MS, "cluster_id": "kRaFt-cluster-1", "bootstrap_servers": ["b-1:9092", "b-2:9092"],
        "window_s": 60.0,
        "moves": [
            {"topic": "orders", "partition": 0, "from_broker": 2, "from_zone": "use1-az2", "to_broker": 1,
             "to_zone": "use1-az1", "saving_bytes": 8_000_000, "saving_usd": 1.6e-4, "replicas_before": [2, 3, 1],
             "replicas_after": [1, 2, 3], "fetch_saving_bytes": 0},
            {"topic": "orders", "partition": 1, "from_broker": 3, "from_zone": "use1-az3", "to_broker": 1,
             "to_zone": "use1-az1", "saving_bytes": 7_000_000, "saving_usd": 1.4e-4, "replicas_before": [3, 1, 2],
             "replicas_after": [1, 3, 2], "fetch_saving_bytes": 2_000_000},  # 5 MB produce, 2 MB consumer
        ]}
    assert parse_plan(json.loads(json.dumps(doc))) == PLAN  # through the file's text and back
    # the reassignment file beside it names the same orders, as kafka-reassign-partitions reads them
    assert reassignment_json(MOVES)["partitions"] == [{"topic": "orders", "partition": 0, "replicas": [1, 2, 3]},
                                                      {"topic": "orders", "partition": 1, "replicas": [1, 3, 2]}]


def test_a_plan_written_before_consumer_bytes_reads_with_none_of_them():
    doc = plan_document(PLAN)
    for move in doc["moves"]:
        del move["fetch_saving_bytes"]
    assert [(m.saving_bytes, m.fetch_saving_bytes, m.produce_saving_bytes) for m in parse_plan(doc).moves] == [
        (8_000_000, 0, 8_000_000), (7_000_000, 0, 7_000_000)]


def test_the_plan_id_is_the_time_of_the_plan_and_a_digest_of_what_it_moves_where():
    plan_id = make_plan_id(MOVES, "kRaFt-cluster-1", CREATED_MS)
    stamp, digest = plan_id.split("-")
    assert stamp == "20261126T010000Z" and len(digest) == 8 and int(digest, 16) >= 0
    assert make_plan_id(MOVES, "kRaFt-cluster-1", CREATED_MS) == plan_id
    assert make_plan_id(MOVES[:1], "kRaFt-cluster-1", CREATED_MS) != plan_id
    assert make_plan_id(MOVES, "another-cluster", CREATED_MS) != plan_id
    assert make_plan_id(MOVES, "kRaFt-cluster-1", CREATED_MS + 1_000).startswith("20261126T010001Z-" + digest)


def edited(**change):
    doc = copy.deepcopy(plan_document(PLAN))
    for key, value in change.items():
        if key.startswith("move0_"):
            doc["moves"][0][key[len("move0_"):]] = value
        else:
            doc[key] = value
    return doc


@pytest.mark.parametrize(("doc", "message"), [
    (reassignment_json(MOVES), 'not a leader plan (no "format": "azsidecar-leader-plan")'),
    (["not", "an", "object"], "not a leader plan"),
    (edited(version=2), "plan file version 2; this command reads 1"),
    ({k: v for k, v in plan_document(PLAN).items() if k != "cluster_id"}, "missing 'cluster_id'"),
    (edited(move0_partition="zero"), "a value of the wrong type"),
    (edited(move0_replicas_after=[1, 2, 4]),
     "moves[0] (orders-0): replicas_after [1, 2, 4] is not a new order of replicas_before [2, 3, 1]"),
    (edited(move0_replicas_after=[2, 1, 3]),
     "moves[0] (orders-0): replicas_after must start with to_broker 1, another broker than from_broker 2"),
    (edited(move0_from_broker=4), "moves[0] (orders-0): from_broker 4 is not one of [2, 3, 1]"),
    (edited(move0_partition=1), "partitions moved twice: orders-1"),
])
def test_a_file_that_is_not_a_plan_of_leader_moves_is_refused_by_name(doc, message):
    with pytest.raises(PlanFileError) as refused:
        parse_plan(doc)
    assert message in str(refused.value)


def test_a_plan_edited_by_its_reviewer_is_the_plan_applied():
    doc = edited()
    doc["moves"] = doc["moves"][1:]  # the reviewer struck orders-0
    assert parse_plan(doc).moves == MOVES[1:]


def test_a_plan_is_for_the_cluster_it_read():
    assert other_cluster(PLAN, "kRaFt-cluster-1") is None
    assert other_cluster(PLAN, "staging") == ("plan 20261126T010000Z-0123abcd was made for cluster "
                                              "'kRaFt-cluster-1'; this is cluster 'staging'")
