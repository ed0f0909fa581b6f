"""Apache Kafka's acks=all throughput through one connection per broker against two, same run.

Run:  .venv/bin/python bench/bench_connections_per_leader.py [--partitions 8] [--rounds 4] [--round-seconds 6]

Why: the agent's goal is to append at 1.2x a plain producer. Both write through one
connection per leader, and a Kafka broker handles one request of a connection at a time
(it mutes the connection until the answer is sent), so with acks=all and replication
factor 3 each connection carries one batch per partition per replication round trip, and
a second request in flight changes nothing (measured with the agent's
`requests_in_flight_per_leader` 4 against 2). Does a second connection to the same leader,
each carrying its own half of the partitions, get Kafka to do more? This bench measures that
on Kafka alone: idempotent confluent-kafka producers (1 KiB records, batches of 256 KiB,
linger 5 ms), one producer writing every partition against two producers (two connections
per broker) each writing the partitions of its parity, on a fresh topic per phase (replicas
spread over the three brokers, every leader answering before the phase starts), the order
alternating by round. Prints MiB/s per phase and round and the medians' ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer  # noqa: E402

from bench.bench_agent import wait_until_led  # noqa: E402
from deploy.local.kafka_cluster import start_kafka_cluster  # noqa: E402

RECORD_BYTES = 1024
FLUSH_TIMEOUT_S = 60.0


def phase_mib_per_s(bootstrap: str, topic: str, partitions: int, producers: int, seconds: float) -> float:
    """MiB/s of records acknowledged (acks=all) from `producers` producers in parallel, each
    writing its share of the partitions for `seconds`."""
    clients = [Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "batch.size": 262144, "queue.buffering.max.kbytes": 131072})
               for _ in range(producers)]
    records = [0] * producers
    errors: list[str] = []
    value = b"x" * RECORD_BYTES

    def write(i: int) -> None:
        client, mine, n = clients[i], [p for p in range(partitions) if p % producers == i], 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            try:
                client.produce(topic, value, partition=mine[n % len(mine)])
                n += 1
            except BufferError:
                client.poll(0.005)
            if n % 1000 == 0:
                client.poll(0)
        if client.flush(FLUSH_TIMEOUT_S):
            errors.append(f"producer {i}: records not delivered within {FLUSH_TIMEOUT_S} s")
        records[i] = n

    started = time.perf_counter()
    threads = [threading.Thread(target=write, args=(i,)) for i in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError("; ".join(errors))
    return sum(records) * RECORD_BYTES / (time.perf_counter() - started) / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--round-seconds", type=float, default=6.0)
    args = parser.parse_args(argv)
    if args.partitions < 2:
        parser.error("--partitions: at least 2 (two connections split them)")
    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    readings: dict[int, list[float]] = {1: [], 2: []}
    with start_kafka_cluster(("a", "b", "c"), log_dir=Path(tempfile.mkdtemp(prefix="bench-connections-"))) as kafka:
        for round_no in range(args.rounds):
            for producers in ((1, 2) if round_no % 2 == 0 else (2, 1)):
                topic = f"bench-connections-{round_no}-{producers}"
                kafka.create_topic(topic, args.partitions, replication_factor=3,
                                   assignments={p: [(p + i) % 3 + 1 for i in range(3)] for p in range(args.partitions)})
                wait_until_led(kafka.bootstrap, topic, args.partitions)
                mib = phase_mib_per_s(kafka.bootstrap, topic, args.partitions, producers, args.round_seconds)
                readings[producers].append(mib)
                print(f"round {round_no + 1}, {producers} connection(s) per broker: {mib:.1f} MiB/s", flush=True)
    one, two = statistics.median(readings[1]), statistics.median(readings[2])
    per_round = [b / a for a, b in zip(readings[1], readings[2], strict=True)]
    print(f"median: one connection {one:.1f} MiB/s, two {two:.1f} MiB/s, {two / one:.2f}x; "
          f"round by round {statistics.median(per_round):.2f}x (min {min(per_round):.2f}x, max {max(per_round):.2f}x)")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
