"""Idempotent producer workload and exactly-once verifier, each run as its own process.

Strategy. A producer process (`produce`) runs inside a zone's network namespace and
writes `--bytes` of records with confluent-kafka (librdkafka), enable.idempotence=true,
acks=all, round-robin over several topics; keyed topics pick the partition from the key
(CRC-32 of the key, like librdkafka's consistent partitioner), unkeyed ones round-robin.
Every value starts with "<producer_id>|<sequence>|", so a consumer can tell exactly which
record it is. The process writes a JSON summary: per topic-partition the record count,
payload bytes, first/last sequence and a SHA-256 over the values in send order.

Routing: `--bootstraps` maps zone -> bootstrap. With one entry every partition goes
there (the sidecar run: bootstrap 127.0.0.1:9092). With one entry per zone, partition p
goes to the broker of leader_zone_of(p, zones), a producer per broker (the baseline:
straight to the leader, across zones when it is elsewhere).

The verifier (`verify`) reads every partition of the topics from offset 0 up to the
high watermark and checks, per (partition, producer), count and digest against the
summaries: a lost, duplicated or reordered record changes the digest, and the sequence
check names the first offending record.

Usage (one process per producer; the scenario in deploy/local/scenario.py drives this):
  python bench/workload.py create-topics --bootstrap H:P --spec '{"topics": [...]}'
  python bench/workload.py produce --spec JSON --producer-id z0-p0 --zone use1-az1 \
      --bootstraps '{"use1-az1": "10.213.0.1:9093", ...}' --bytes 10000000 --out s.json
  python bench/workload.py verify --bootstrap H:P --summaries s1.json s2.json --out v.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import uuid
import zlib
from collections.abc import Sequence
from pathlib import Path

from deploy.local.leader_zones import leader_zone_of

SEPARATOR = b"|"
SEQ_DIGITS = 10  # fixed width keeps every value of one size the same length
PROGRESS_EVERY_S = 1.0  # how often the progress file is rewritten
FLUSH_TIMEOUT_S = 120.0  # waiting for the last acks; a healthy broker needs a second
METADATA_TIMEOUT_S = 30.0  # a paced producer waits this long at most for its first metadata
PACING_TICK_S = 0.005  # a paced producer sends the records due within this at once (linger is 5-250 ms)
VERIFY_IDLE_TIMEOUT_S = 30.0  # no new record for this long while records are missing: give up
DRAIN_TIMEOUT_S = 2.0  # after the expected end, an empty poll this long means the log has no extra records
MAX_PROBLEMS = 20  # the first few problems say enough; a broken run would list millions
QUEUE_MAX_KBYTES = 65536  # librdkafka's local queue: bounded memory per producer (64 MiB)


def value_of(producer_id: str, seq: int, record_bytes: int) -> bytes:
    """The record value: header "<producer_id>|<seq>|" then filler up to record_bytes."""
    head = producer_id.encode() + SEPARATOR + str(seq).zfill(SEQ_DIGITS).encode() + SEPARATOR
    if len(head) > record_bytes:
        raise ValueError(f"record_bytes {record_bytes} < header {len(head)}")
    filler = (b"%d" % (seq % 10)) * (record_bytes - len(head))
    return head + filler


def parse_value(value: bytes) -> tuple[str, int]:
    """(producer_id, seq) from a value; raises ValueError if it is not one of ours."""
    parts = value.split(SEPARATOR, 2)
    if len(parts) != 3:
        raise ValueError(f"not a workload value: {value[:40]!r}")
    return parts[0].decode(), int(parts[1])


def key_of(seq: int, key_space: int) -> bytes:
    return b"key-%d" % (seq % key_space)


def partition_of(topic: dict, n: int, key: bytes | None) -> int:
    if key is not None:
        return zlib.crc32(key) % topic["partitions"]
    return n % topic["partitions"]


def _digest_update(h, value: bytes) -> None:
    h.update(len(value).to_bytes(4, "big"))  # length prefix: no two value lists hash alike
    h.update(value)


def create_topics(bootstrap: str, spec: dict, timeout_s: float = 30.0) -> None:
    """Create the spec's topics (already existing ones are fine). Raises RuntimeError."""
    from confluent_kafka import KafkaError  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient, NewTopic  # noqa: PLC0415

    admin = AdminClient({"bootstrap.servers": bootstrap})
    # -1: the brokers' default.replication.factor (3 on the local Apache Kafka cluster).
    replication = int(spec.get("replication_factor", 1))
    futures = admin.create_topics([NewTopic(t["name"], t["partitions"], replication) for t in spec["topics"]],
                                  operation_timeout=timeout_s, request_timeout=timeout_s)
    for name, fut in futures.items():
        try:
            fut.result(timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001 - confluent raises KafkaException around a KafkaError
            err = exc.args[0] if exc.args else None
            if getattr(err, "code", lambda: None)() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise RuntimeError(f"create topic {name}: {exc}") from exc


def topic_rounds(topics: Sequence[dict], zone: str) -> list[int]:
    """One round of topic indexes for a producer in `zone`: topic i `zone_weights[zone]`
    times in a row (1 without weights), in topic order; record n goes to rounds[n % len]."""
    return [i for i, t in enumerate(topics) for _ in range(int(t.get("zone_weights", {}).get(zone, 1)))]


def produce(spec: dict, producer_id: str, zone: str, bootstraps: dict[str, str], total_bytes: int,
            out: Path) -> dict:
    """Produce total_bytes of records; write and return the summary. Raises RuntimeError on failed delivery."""
    from confluent_kafka import Producer  # noqa: PLC0415

    record_bytes = spec["record_bytes"]
    key_space = spec.get("key_space", 1000)
    topics = spec["topics"]
    rounds = topic_rounds(topics, zone)
    zones = list(bootstraps)
    producers = {
        z: Producer({
            "bootstrap.servers": b,
            "client.id": f"{producer_id}-to-{z}",
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": spec.get("linger_ms", 20),
            # deploy/local/scenario.Workload.max_in_flight says why runs ask for fewer than 5
            "max.in.flight.requests.per.connection": int(spec.get("max_in_flight", 5)),
            "compression.type": "none",  # metered bytes must be comparable to payload bytes
            "queue.buffering.max.kbytes": QUEUE_MAX_KBYTES,
            "message.timeout.ms": int(spec.get("message_timeout_ms", 120_000)),
        })
        for z, b in bootstraps.items()
    }
    # Kafka: each partition's leader zone as Metadata named it when the run began (the
    # scenario reads it after creating the topics); Tansu: the partition-number convention.
    leader_zones = spec.get("leader_zones", {})

    def leader_zone(topic_name: str, partition: int) -> str:
        known = leader_zones.get(topic_name, {}).get(str(partition))
        return known if known is not None else leader_zone_of(partition, spec["zones"])

    parts: dict[str, dict] = {}
    digests: dict[str, object] = {}
    state = {"acked": 0, "acked_bytes": 0, "errors": 0, "first_error": None}
    failed_records: list[list] = []  # [topic:partition, seq] of every record whose delivery failed
    latencies_s: list[float] = []  # produce() -> ack of the records acked since the last progress write
    all_latencies_s: list[float] = []  # the whole run's, for the summary
    records_per_s = spec.get("records_per_s")  # None: as fast as the producer goes

    def on_delivery(err, msg) -> None:
        if err is not None:
            state["errors"] += 1
            state["first_error"] = state["first_error"] or str(err)
            failed_records.append([f"{msg.topic()}:{msg.partition()}", parse_value(msg.value())[1]])
        else:
            state["acked"] += 1
            state["acked_bytes"] += len(msg.value())
            latency_s = msg.latency()
            if latency_s is not None:
                latencies_s.append(latency_s)
                all_latencies_s.append(latency_s)

    records = total_bytes // record_bytes
    if records and not rounds:
        raise RuntimeError(f"{producer_id}: every topic weighs zone {zone} 0, yet it has {records} records to send")
    per_topic_n = [0] * len(topics)
    progress = out.with_suffix(".progress")
    if records_per_s:
        # Paced: start the clock once each producer has its brokers' metadata. Otherwise a slow
        # start (a loaded machine) queues the first seconds' records at once, and they go out
        # in one request per partition instead of at the pace asked for.
        for producer in producers.values():
            producer.list_topics(timeout=METADATA_TIMEOUT_S)
    started = time.monotonic()
    last_progress = started
    payload_bytes = 0
    for seq in range(records):
        while records_per_s and (ahead_s := started + seq / records_per_s - time.monotonic()) > 0:
            # Paced: serve delivery reports until this record is due, in ticks of at least
            # PACING_TICK_S, then send every record due by then. Waiting for each record alone
            # spun (poll() counts whole milliseconds, so a shorter wait returned at once: 3.2
            # million polls for 15,000 records, 0.4 of a core at 1,000 records/s).
            producers[zones[0]].poll(max(ahead_s, PACING_TICK_S))
        t = rounds[seq % len(rounds)]
        topic = topics[t]
        key = key_of(seq, key_space) if topic.get("keyed") else None
        partition = partition_of(topic, per_topic_n[t], key)
        per_topic_n[t] += 1
        value = value_of(producer_id, seq, record_bytes)
        leader = zones[0] if len(zones) == 1 else leader_zone(topic["name"], partition)
        producer = producers[leader]
        while True:
            try:
                producer.produce(topic["name"], value=value, key=key, partition=partition, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)  # local queue full: serve delivery reports, then retry
        producer.poll(0)
        tp = f"{topic['name']}:{partition}"
        entry = parts.get(tp)
        if entry is None:
            entry = parts[tp] = {"count": 0, "bytes": 0, "first_seq": seq, "last_seq": seq,
                                 "leader_zone": leader_zone(topic["name"], partition)}
            digests[tp] = hashlib.sha256()
        entry["count"] += 1
        entry["bytes"] += len(value) + (len(key) if key else 0)
        entry["last_seq"] = seq
        payload_bytes += len(value) + (len(key) if key else 0)
        _digest_update(digests[tp], value)
        now = time.monotonic()
        if now - last_progress >= PROGRESS_EVERY_S:
            last_progress = now
            write_progress(progress, {"records": records, "acked": state["acked"], "sent": seq + 1,
                                      "errors": state["errors"], **_latency_ms(latencies_s)})
            latencies_s.clear()
    flush_deadline = time.monotonic() + FLUSH_TIMEOUT_S
    while True:  # flush in slices so the progress file keeps moving while acks arrive
        remaining = sum(p.flush(PROGRESS_EVERY_S) for p in producers.values())
        write_progress(progress, {"records": records, "acked": state["acked"], "sent": records,
                                  "errors": state["errors"], **_latency_ms(latencies_s)})
        latencies_s.clear()
        if remaining == 0 or time.monotonic() > flush_deadline:
            break
    duration_s = time.monotonic() - started
    for tp, h in digests.items():
        parts[tp]["digest"] = h.hexdigest()
    summary = {
        "producer_id": producer_id, "zone": zone, "bootstraps": bootstraps, "records": records,
        "payload_bytes": payload_bytes, "acked": state["acked"], "errors": state["errors"],
        "first_error": state["first_error"], "unflushed": remaining, "duration_s": duration_s,
        "partitions": parts, "failed_records": failed_records, "latency": _latency_ms(all_latencies_s),
    }
    out.write_text(json.dumps(summary, indent=1, sort_keys=True))
    if state["errors"] or remaining or state["acked"] != records:
        raise RuntimeError(f"{producer_id}: {state['acked']}/{records} acked, {state['errors']} errors "
                           f"(first: {state['first_error']}), {remaining} unflushed")
    return summary


def write_progress(path: Path, progress: dict) -> None:
    """Replace the progress file whole (a temporary file renamed over it): a reader polling it
    while it is rewritten met an empty file and counted this producer's acknowledged records
    as none."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(progress))
    os.replace(partial, path)


def _latency_ms(latencies_s: list[float]) -> dict:
    """p50/p99/max of produce-to-ack latencies, ms (empty when nothing was acked)."""
    if not latencies_s:
        return {}
    ordered = sorted(latencies_s)
    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)
    return {"lat_n": len(ordered), "lat_p50_ms": at(0.50), "lat_p99_ms": at(0.99), "lat_max_ms": at(1.0)}


def verify(bootstrap: str, summaries: Sequence[dict], timeout_s: float = 300.0,
           idle_timeout_s: float = VERIFY_IDLE_TIMEOUT_S) -> dict:
    """Consume every partition named in the summaries and check exactly-once, in-order delivery.

    Returns {"ok", "records", "problems", ...}; a delivery problem (missing, duplicate,
    reordered, foreign record, or a log that ends early) is reported, not raised.
    """
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    expected: dict[tuple[str, str], dict] = {}
    for s in summaries:
        for tp, entry in s["partitions"].items():
            expected[(tp, s["producer_id"])] = entry
    tps = sorted({tp for tp, _ in expected}, key=lambda x: (x.rsplit(":", 1)[0], int(x.rsplit(":", 1)[1])))
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    problems: list[str] = []

    def problem(text: str) -> None:
        if len(problems) < MAX_PROBLEMS:
            problems.append(text)

    try:
        # Read at least what the summaries expect: Tansu's high watermark can lag the log
        # (it has answered "base offset of the last batch + 1"), so it is only a lower bound.
        high: dict[str, int] = {tp: 0 for tp in tps}
        for (tp, _), entry in expected.items():
            high[tp] += entry["count"]
        for tp in tps:
            topic, p = tp.rsplit(":", 1)
            _, watermark = consumer.get_watermark_offsets(TopicPartition(topic, int(p)), timeout=30)
            high[tp] = max(high[tp], watermark)
        consumer.assign([TopicPartition(tp.rsplit(":", 1)[0], int(tp.rsplit(":", 1)[1]), 0) for tp in tps])
        seen: dict[tuple[str, str], dict] = {}
        next_offset = {tp: 0 for tp in tps}
        deadline = time.monotonic() + timeout_s
        last_progress = time.monotonic()
        total = 0
        draining = False
        while True:
            if not draining and all(next_offset[tp] >= high[tp] for tp in tps):
                draining = True  # all expected records read; anything more is a duplicate
            now = time.monotonic()
            if not draining and (now > deadline or now - last_progress > idle_timeout_s):
                behind = {tp: (next_offset[tp], high[tp]) for tp in tps if next_offset[tp] < high[tp]}
                problem(f"log ends before the expected records (next offset, expected end): {behind}")
                break
            batch = consumer.consume(num_messages=1000, timeout=DRAIN_TIMEOUT_S if draining else 1.0)
            if draining and not batch:
                break
            for msg in batch:
                if msg.error():
                    problem(f"consume error: {msg.error()}")
                    continue
                tp = f"{msg.topic()}:{msg.partition()}"
                last_progress = time.monotonic()
                next_offset[tp] = msg.offset() + 1
                total += 1
                try:
                    pid, seq = parse_value(msg.value())
                except ValueError as exc:
                    problem(f"{tp}@{msg.offset()}: {exc}")
                    continue
                st = seen.get((tp, pid))
                if st is None:
                    st = seen[(tp, pid)] = {"count": 0, "last_seq": -1, "sha": hashlib.sha256()}
                if seq <= st["last_seq"]:
                    kind = "duplicate" if seq == st["last_seq"] else "out of order"
                    problem(f"{tp}@{msg.offset()}: {kind}: {pid} seq {seq} after {st['last_seq']}")
                st["last_seq"] = max(seq, st["last_seq"])
                st["count"] += 1
                _digest_update(st["sha"], msg.value())
    finally:
        consumer.close()
    for key, want in expected.items():
        got = seen.get(key)
        if got is None:
            problem(f"{key[0]} {key[1]}: no records, expected {want['count']}")
        elif got["count"] != want["count"] or got["sha"].hexdigest() != want["digest"]:
            problem(f"{key[0]} {key[1]}: {got['count']} records (expected {want['count']}), "
                    f"digest {'matches' if got['sha'].hexdigest() == want['digest'] else 'differs'}")
    for key in seen.keys() - expected.keys():
        problem(f"{key[0]} {key[1]}: records from a producer no summary mentions")
    return {"ok": not problems, "records": total, "expected_records": sum(e["count"] for e in expected.values()),
            "partitions": len(tps), "problems": problems}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("create-topics")
    c.add_argument("--bootstrap", required=True)
    c.add_argument("--spec", required=True, help="workload spec JSON")
    p = sub.add_parser("produce")
    p.add_argument("--spec", required=True)
    p.add_argument("--producer-id", required=True)
    p.add_argument("--zone", required=True)
    p.add_argument("--bootstraps", required=True, help='JSON {"zone": "host:port"}, in zone order')
    p.add_argument("--bytes", type=int, required=True)
    p.add_argument("--out", type=Path, required=True)
    v = sub.add_parser("verify")
    v.add_argument("--bootstrap", required=True)
    v.add_argument("--summaries", type=Path, nargs="+", required=True)
    v.add_argument("--out", type=Path, required=True)
    v.add_argument("--timeout-s", type=float, default=300.0)
    args = parser.parse_args(argv)
    if args.cmd == "create-topics":
        create_topics(args.bootstrap, json.loads(args.spec))
        return 0
    if args.cmd == "produce":
        try:
            produce(json.loads(args.spec), args.producer_id, args.zone, json.loads(args.bootstraps),
                    args.bytes, args.out)
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            return 1
        return 0
    result = verify(args.bootstrap, [json.loads(s.read_text()) for s in args.summaries], args.timeout_s)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("ok", "records", "expected_records")}))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
