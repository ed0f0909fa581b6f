"""A topic created while the WAL route is warm: its first notification is not a gray failure.

The proxy in use1-az1 has sent the agent of use1-az2 notifications for one topic, enough
that the notification deadline is the short one its answers set (wal_s3/latency.py). Then
a new topic led in use1-az2 is created and produced to at once: the agent's first append to
it (it has never appended to that topic) must be answered within that deadline, so no
attempt is abandoned as gray, the zone's circuit stays closed and every batch of both
topics goes by the WAL, with the default notify settings.

The new partition appears while its followers' fetch from node 2 (of the warm partition) is in
flight, so node 2 answers the first acks=all append only when that fetch returns, up to
replica.fetch.wait.max.ms (5 s on this cluster): 4.86 s and 4.99 s in two runs (2026-12-01),
where the warm appends took 15-80 ms. Before first contacts waited notify.timeout_s, the
attempt was abandoned at its 1.02 s gray deadline and the zone's batches went direct.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import confluent_kafka
import pytest

from tests.conftest import unique_name
from tests.integration.cluster.conftest import producer, wal_sidecars

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(180)]

WARM_NOTIFICATIONS = 8  # the deadline comes from history after 5 answers (latency.MIN_SAMPLES)
RECORDS_PER_ROUND = 5


def audit_records(audit_dir: Path, kind: str) -> list[dict]:
    return [r for path in audit_dir.rglob("*.jsonl.gz") for r in map(json.loads, gzip.open(path, "rt"))
            if r["kind"] == kind]


def produce_round(p: confluent_kafka.Producer, topic: str, values: range, acked: dict[int, int],
                  failed: list[str]) -> None:
    """Produce `values` to partition 0 of `topic` and wait for every answer: each round is
    one batch, so at least one notification of its own."""
    def report(err, msg) -> None:
        if err is not None:
            failed.append(f"{msg.topic()}:{msg.value()!r}: {err}")
        else:
            acked[int(msg.value())] = msg.offset()

    for value in values:
        p.produce(topic, str(value).encode(), partition=0, on_delivery=report)
    assert p.flush(60) == 0


def test_a_new_topics_first_notification_is_not_gray(kafka, moto_server, tmp_path):
    bucket = unique_name("wal")
    moto_server.create_bucket(bucket)
    warm, fresh = unique_name("warm"), unique_name("fresh")
    kafka.create_topic(warm, 1, assignments={0: [2, 3, 1]})  # led by node 2, in use1-az2
    acked: dict[str, dict[int, int]] = {warm: {}, fresh: {}}
    failed: list[str] = []
    with wal_sidecars(kafka, moto_server, bucket, tmp_path) as sidecars:
        p = producer(sidecars.proxy, acks="all")
        for r in range(WARM_NOTIFICATIONS):
            produce_round(p, warm, range(r * RECORDS_PER_ROUND, (r + 1) * RECORDS_PER_ROUND), acked[warm], failed)
        kafka.create_topic(fresh, 1, assignments={0: [2, 3, 1]})  # and at once:
        produce_round(p, fresh, range(RECORDS_PER_ROUND), acked[fresh], failed)
        produce_round(p, warm, range(100, 100 + RECORDS_PER_ROUND), acked[warm], failed)  # the zone still takes the WAL

    assert failed == []
    # value -> offset, written out from the rounds: each topic's partition 0 from offset 0, in order
    assert acked[fresh] == {0: 0, 1: 1, 2: 2, 3: 3, 4: 4}
    warm_values = [*range(WARM_NOTIFICATIONS * RECORDS_PER_ROUND), *range(100, 105)]
    assert acked[warm] == {v: i for i, v in enumerate(warm_values)}

    batches = [b for b in audit_records(sidecars.audit_dir, "produce_batch") if b["topic"] in (warm, fresh)]
    assert {b["topic"] for b in batches} == {warm, fresh}
    assert [b for b in batches if b["route"] != "wal" or b["error_code"] != 0] == []  # nothing went direct
    notes = [n for n in audit_records(sidecars.audit_dir, "notification") if n["dest_zone"] == "use1-az2"]
    assert len(notes) >= WARM_NOTIFICATIONS + 2
    # one attempt each: none was abandoned at its gray deadline and sent again
    assert [n for n in notes if n["attempts"] != 1 or n["status"] != "ok"] == []
