"""The produce matrix shared by the real-client tests, and the check of what arrived.

Every client produces the same runs: each run is one producer configuration (acks,
idempotence, compression, keyed or not) writing `count` records to one of three topics.
A record's value is `<run>:<seq>` with seq counting up per run, so a consumer reading
Tansu directly can tell, per partition, whether records arrived once and in order.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections import defaultdict
from dataclasses import dataclass

from tests.integration.readback import read_partitions

TOPIC_COUNT = 3
PARTITIONS = 6
KEY_SPACE = 40  # keyed runs spread over every partition, with repeats per key
CONSUME_TIMEOUT_S = 60.0
PRODUCE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Run:
    name: str
    acks: int  # -1 = all
    idempotent: bool
    compression: str  # none, gzip, snappy, lz4, zstd
    keyed: bool
    topic_index: int
    count: int

    def value(self, seq: int) -> bytes:
        return f"{self.name}:{seq}".encode()

    def key(self, seq: int) -> bytes | None:
        return f"k{seq % KEY_SPACE}".encode() if self.keyed else None


# Every value of every dimension, 11,500 records in all.
RUNS = (
    Run("all-zstd-keyed", -1, True, "zstd", True, 0, 3000),
    Run("one-lz4-unkeyed", 1, False, "lz4", False, 1, 2000),
    Run("zero-snappy-keyed", 0, False, "snappy", True, 2, 1500),
    Run("all-gzip-unkeyed", -1, True, "gzip", False, 0, 2000),
    Run("one-none-keyed", 1, False, "none", True, 1, 2000),
    Run("zero-none-unkeyed", 0, False, "none", False, 2, 1000),
)
assert sum(r.count for r in RUNS) >= 10_000


def topic_names(prefix: str) -> list[str]:
    return [f"{prefix}-t{i}" for i in range(TOPIC_COUNT)]


def consume_everything(upstream_bootstrap: str, topics: list[str], runs=RUNS,
                       ) -> dict[tuple[str, int], list[tuple[bytes | None, bytes]]]:
    """Read every partition of `topics` from the broker to its end (tests/integration/readback.py).

    The end a consumer can read to is the high watermark, which an acks=1 append passes only
    once the followers have fetched it (up to replica.fetch.wait.max.ms later, longer on a
    loaded machine): so the partitions are read again, from the beginning, until the records
    of the runs the producers had acknowledged (acks >= 1) are all there or CONSUME_TIMEOUT_S
    has passed; check_delivery then says what is missing or doubled.
    Returns (topic, partition) -> [(key, value)] in offset order.
    """
    acknowledged = {r.name for r in runs if r.acks != 0}
    expected = sum(r.count for r in runs if r.acks != 0)
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    while True:
        records = read_partitions(upstream_bootstrap, [(t, p) for t in topics for p in range(PARTITIONS)],
                                  timeout_s=max(1.0, deadline - time.monotonic()))
        got = {tp: [(r.key, r.value) for r in rs] for tp, rs in records.items()}
        seen = sum(1 for rs in got.values() for _, value in rs
                   if value.decode(errors="replace").partition(":")[0] in acknowledged)
        if seen >= expected or time.monotonic() >= deadline:
            return got


def check_delivery(received: dict[tuple[str, int], list[tuple[bytes | None, bytes]]], topics: list[str],
                   runs=RUNS) -> None:
    """Assert: acks>=1 runs arrived exactly once; acks=0 at most once; all in per-partition order;
    one key always lands on one partition."""
    by_name = {r.name: r for r in runs}
    seen: dict[str, list[int]] = defaultdict(list)
    for (topic, partition), records in received.items():
        last_seq: dict[str, int] = {}
        for key, value in records:
            name, _, seq_text = value.decode().partition(":")
            run = by_name[name]
            seq = int(seq_text)
            assert topic == topics[run.topic_index], f"{name} record in wrong topic {topic}"
            assert key == run.key(seq), f"{name}:{seq} key {key!r}"
            assert seq > last_seq.get(name, -1), f"{topic}-{partition}: {name}:{seq} after {last_seq.get(name)}"
            last_seq[name] = seq
            seen[name].append(seq)
    key_partitions: dict[tuple[str, bytes], set[int]] = defaultdict(set)
    for (topic, partition), records in received.items():
        for key, _ in records:
            if key is not None:
                key_partitions[(topic, key)].add(partition)
    assert all(len(ps) == 1 for ps in key_partitions.values()), "a key landed on two partitions"
    for run in runs:
        got = sorted(seen[run.name])
        if run.acks == 0:
            assert len(got) == len(set(got)), f"{run.name}: duplicates"
            assert set(got) <= set(range(run.count)), f"{run.name}: records never produced"
        else:
            assert got == list(range(run.count)), f"{run.name}: {len(got)} of {run.count}, not each once"


# --- the matrix, produced by each client (the tests call these against a proxy) -----------

def acks_text(acks: int) -> str:
    return "all" if acks == -1 else str(acks)


def produce_confluent(bootstrap: str, topics: list[str], runs=RUNS) -> None:
    from confluent_kafka import Producer

    for run in runs:
        errors: list = []
        producer = Producer({
            "bootstrap.servers": bootstrap, "acks": acks_text(run.acks),
            "enable.idempotence": run.idempotent, "compression.type": run.compression,
            "linger.ms": 5, "partitioner": "murmur2_random",
        })
        for seq in range(run.count):
            producer.produce(topics[run.topic_index], value=run.value(seq), key=run.key(seq),
                             on_delivery=lambda err, _msg: errors.append(err) if err else None)
            producer.poll(0)
        assert producer.flush(PRODUCE_TIMEOUT_S) == 0, f"{run.name}: undelivered records"
        assert errors == [], f"{run.name}: {errors[:3]}"


def produce_kafka_python(bootstrap: str, topics: list[str], runs=RUNS) -> None:
    from kafka import KafkaProducer

    for run in runs:
        producer = KafkaProducer(
            bootstrap_servers=bootstrap, acks="all" if run.acks == -1 else run.acks,
            enable_idempotence=run.idempotent,
            compression_type=None if run.compression == "none" else run.compression, linger_ms=5)
        try:
            futures = [producer.send(topics[run.topic_index], value=run.value(seq), key=run.key(seq))
                       for seq in range(run.count)]
            producer.flush(timeout=PRODUCE_TIMEOUT_S)
            if run.acks != 0:
                for f in futures:
                    f.get(timeout=PRODUCE_TIMEOUT_S)  # raises the broker's error, if any
        finally:
            producer.close(timeout=10)


def produce_aiokafka(bootstrap: str, topics: list[str], runs=RUNS) -> None:
    from aiokafka import AIOKafkaProducer

    async def produce_all() -> None:
        for run in runs:
            producer = AIOKafkaProducer(
                bootstrap_servers=bootstrap, acks="all" if run.acks == -1 else run.acks,
                enable_idempotence=run.idempotent,
                compression_type=None if run.compression == "none" else run.compression, linger_ms=5)
            await producer.start()
            try:
                futures = [await producer.send(topics[run.topic_index], value=run.value(seq), key=run.key(seq))
                           for seq in range(run.count)]
                async with asyncio.timeout(PRODUCE_TIMEOUT_S):
                    await asyncio.gather(*futures)  # raises the broker's error, if any
            finally:
                await producer.stop()

    asyncio.run(produce_all())


def produce_kcat(bootstrap: str, topics: list[str], runs=RUNS) -> None:
    for run in runs:
        # kcat reads one record per line; -K splits key and value at the first ':'.
        lines = [(run.key(seq) + b"|" if run.keyed else b"") + run.value(seq) for seq in range(run.count)]
        cmd = ["kcat", "-P", "-b", bootstrap, "-t", topics[run.topic_index],
               "-X", f"acks={acks_text(run.acks)}", "-X", f"enable.idempotence={str(run.idempotent).lower()}",
               "-X", f"compression.codec={run.compression}", "-X", "linger.ms=5",
               "-X", "partitioner=murmur2_random"]
        if run.keyed:
            cmd += ["-K", "|"]
        done = subprocess.run(cmd, input=b"\n".join(lines) + b"\n", capture_output=True, timeout=PRODUCE_TIMEOUT_S)
        assert done.returncode == 0, f"{run.name}: kcat failed: {done.stderr.decode(errors='replace')[-2000:]}"
        assert b"ERROR" not in done.stderr and b"error" not in done.stderr.lower(), done.stderr[-2000:]
