"""Three agents in one zone owning its brokers (notify.agent_ownership = "leader"), on a
five-broker cluster whose use1-az2 has three brokers: every object lays a broker's
partitions out for one agent; when the leaders move to other brokers of the zone mid-run,
the partitions move to those brokers' agents, and every record is in the log once, in
order, for an idempotent and a non-idempotent producer.
"""

from __future__ import annotations

import time

import pytest

from deploy.local.mock_cluster import start_mock_cluster
from tests.conftest import unique_name
from tests.integration.cluster.conftest import Delivery, produce, producer, read_back, wal_sidecars
from wal_s3.agent_shares import parse_share_entries
from wal_s3.format import parse_object

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

AZ1, AZ2, AZ3 = "use1-az1", "use1-az2", "use1-az3"
RACKS = {1: AZ1, 2: AZ2, 3: AZ2, 4: AZ2, 5: AZ3}
PARTITIONS = 12
# Brokers 2, 3, 4 lead in use1-az2: ranks 0, 1, 2, so agents 0, 1, 2 (leader_notify/sender/owners.py).
AGENT_OF_BROKER = {2: 0, 3: 1, 4: 2}
BEFORE = {p: (2, 3, 4)[p % 3] for p in range(PARTITIONS)}
AFTER = {p: (3, 4, 2)[p % 3] for p in range(PARTITIONS)}  # each leader moves to the next broker of the zone


def object_layouts(s3, bucket: str, keys: set[str]) -> list[list[tuple[int, set[int]]]]:
    """Per object: (agent index, partitions) of each agent's run in use1-az2, from the object
    and its share-entries metadata (the layout as the proxy wrote it)."""
    out = []
    for key in sorted(keys):
        got = s3.get_object(Bucket=bucket, Key=key)
        parsed = parse_object(got["Body"].read())
        if AZ2 not in parsed.zones:
            continue
        meta = got["Metadata"]
        runs = parse_share_entries(meta["zones"], meta["share-entries"])[AZ2]
        entries = parsed.zones[AZ2]
        out.append([(agent, {e.partition for e in entries[first:end]}) for agent, first, end in runs])
    return out


def wal_keys(s3, bucket: str) -> set[str]:
    listed = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"] for o in listed if not o["Key"].startswith("_checkpoints")}


@pytest.mark.parametrize("idempotent", [True, False])
def test_agents_own_the_zones_brokers_and_follow_moving_leaders(moto_server, tmp_path, idempotent):
    bucket = unique_name("wal")
    moto_server.create_bucket(bucket)
    s3 = moto_server.client()
    warmup = [(p, p) for p in range(PARTITIONS)]  # the proxy sees every broker of az2 lead
    first = [(i % PARTITIONS, i) for i in range(100, 400)]
    second: list[tuple[int, int]] = []
    moved_to_new: set[int] = set()  # partitions seen in an object at their new leader's agent
    delivery = Delivery()
    with start_mock_cluster(5, racks=RACKS, log_dir=tmp_path) as cluster:
        cluster.create_topic("orders", PARTITIONS)
        for p, broker in BEFORE.items():
            cluster.set_leader("orders", p, broker)
        with wal_sidecars(cluster, moto_server, bucket, tmp_path, agent_counts={AZ2: 3, AZ3: 1},
                          settings={"notify": {"agent_ownership": "leader"},
                                    "upstream": {"metadata_ttl_s": 1.0}}) as sidecars:
            p = producer(sidecars.proxy, **({} if idempotent else {"enable.idempotence": False}))
            produce(p, "orders", warmup, delivery)
            assert p.flush(60) == 0
            before_first = wal_keys(s3, bucket)
            produce(p, "orders", first, delivery)
            assert p.flush(60) == 0
            first_keys = wal_keys(s3, bucket) - before_first
            for partition, broker in AFTER.items():
                cluster.set_leader("orders", partition, broker)
            # The agents append to the new leaders at once (theirs is the real leader); the
            # proxy moves each partition to its new broker's agent when its Metadata view
            # expires (upstream.metadata_ttl_s), draining it first. Rounds of one record
            # per partition until every partition was written for its new agent.
            seen = before_first | first_keys
            deadline = time.monotonic() + 60
            while moved_to_new != set(range(PARTITIONS)) and time.monotonic() < deadline:
                start = 400 + len(second)
                batch = [(i % PARTITIONS, i) for i in range(start, start + PARTITIONS)]
                second += batch
                produce(p, "orders", batch, delivery)
                assert p.flush(60) == 0
                new_keys = wal_keys(s3, bucket) - seen
                seen |= new_keys
                for runs in object_layouts(s3, bucket, new_keys):
                    for agent, partitions in runs:
                        for part in partitions:
                            # at its old broker's agent until the proxy learns the move, then at the
                            # new one's; never at a third agent
                            assert agent in (AGENT_OF_BROKER[BEFORE[part]], AGENT_OF_BROKER[AFTER[part]]), runs
                            if agent == AGENT_OF_BROKER[AFTER[part]]:
                                moved_to_new.add(part)
            del p  # before the sidecars stop: an idle producer would keep reconnecting to the proxy
        assert moved_to_new == set(range(PARTITIONS))
        assert not delivery.failed, delivery.failed[:5]
        want: dict[int, list[int]] = {}
        for partition, value in warmup + first + second:
            want.setdefault(partition, []).append(value)
        assert delivery.acked == want
        total = len(warmup) + len(first) + len(second)
        assert read_back(cluster.bootstrap, "orders", PARTITIONS, total) == want  # once each, in order

    # Before the move: every run of every object is one broker's partitions, at that broker's agent.
    layouts = object_layouts(s3, bucket, first_keys)
    assert layouts
    for runs in layouts:
        for agent, partitions in runs:
            assert {AGENT_OF_BROKER[BEFORE[p]] for p in partitions} == {agent}, runs
