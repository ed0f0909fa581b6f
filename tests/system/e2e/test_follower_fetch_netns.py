"""Follower fetching through the sidecar, shown by the meter (root: network namespaces).

Three zones with a node of an Apache Kafka cluster in each (`broker.rack` = the zone, the
rack-aware replica selector). A producer in use1-az2 writes 5 MB to a partition led by
use1-az2's node. Then a consumer in use1-az1 reads it through use1-az1's sidecar
(pass-through on), which tells the brokers its zone as the consumer's rack: the leader
sends it to its use1-az1 replica, and the records never cross a zone. The inter-zone
bridge's counters over the read must stay below 5 % of the partition's bytes (Fetch
answers without records, Metadata, the group's requests); read from the leader they would
be above 100 %. Replication runs on links of its own and is not in this meter.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from deploy.local.sidecar_stack import SidecarSettings, sidecar_starter
from deploy.local.zones import three_zones

# Bytes, records and bounded waits only, and an environment of its own: runs beside the
# system tier's chain at the integration tier's priority (tests/conftest.py).
BESIDE_THE_SYSTEM_TIER = True

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.root, pytest.mark.timeout(600),
              pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")]

RECORDS = 5000
VALUE_BYTES = 1000
STEP_TIMEOUT_S = 120.0

PRODUCE = """
import sys, confluent_kafka
p = confluent_kafka.Producer({"bootstrap.servers": sys.argv[1], "acks": "all", "enable.idempotence": True,
                              "linger.ms": 20, "compression.type": "none"})
for i in range(int(sys.argv[3])):
    while True:
        try:
            p.produce(sys.argv[2], (b"%09d" % i) + b"x" * 991, partition=0)
            break
        except BufferError:
            p.poll(0.05)
    p.poll(0)
sys.exit(0 if p.flush(60) == 0 else 1)
"""

CONSUME = """
import sys, time, confluent_kafka
c = confluent_kafka.Consumer({"bootstrap.servers": sys.argv[1], "group.id": "ff-" + sys.argv[2],
                              "enable.auto.commit": False})
c.assign([confluent_kafka.TopicPartition(sys.argv[2], 0, confluent_kafka.OFFSET_BEGINNING)])
want, seen, deadline = int(sys.argv[3]), set(), time.monotonic() + 90
while len(seen) < want and time.monotonic() < deadline:
    m = c.poll(0.2)
    if m is not None and not m.error():
        seen.add(int(m.value()[:9]))
c.close()
print(len(seen))
sys.exit(0 if seen == set(range(want)) else 1)
"""


def test_a_consumer_through_the_sidecar_reads_another_zones_partition_without_crossing(tmp_path):
    with three_zones(mode="netns", log_dir=tmp_path / "zones", broker="kafka") as env:
        env.create_bucket("wal")
        z1, z2 = env.zones[0], env.zones[1]
        leader = env.kafka.node_of_rack(z2.name).node_id
        others = [n for n in env.kafka.nodes if n != leader]
        env.kafka.create_topic("far", 1, assignments={0: [leader, *others]})
        code = env.run_to_completion(z2, [sys.executable, "-c", PRODUCE, z2.broker_bootstrap, "far", str(RECORDS)],
                                     STEP_TIMEOUT_S, log_name="produce")
        assert code == 0, (tmp_path / "zones" / "produce.log").read_text()[-2000:]
        settings = SidecarSettings(wal_bucket="wal", audit_dir=tmp_path / "audit", policy="direct",
                                   extra={"proxy": {"broker_listeners": True}})
        with sidecar_starter(env, settings)(env, z1), env.meter().measure() as reading:
            code = env.run_to_completion(z1, [sys.executable, "-c", CONSUME, z1.sidecar_bootstrap, "far",
                                              str(RECORDS)], STEP_TIMEOUT_S, log_name="consume")
        log = Path(tmp_path / "zones" / "consume.log").read_text()
        assert code == 0, log[-2000:]
    crossed = reading[0].total_bytes
    payload = RECORDS * VALUE_BYTES
    assert crossed is not None and crossed < 0.05 * payload, (crossed, payload)
