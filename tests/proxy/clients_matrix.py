"""The produce matrix shared by the real-client tests, and the check of what arrived.

Every client produces the same runs: each run is one producer configuration (acks,
idempotence, compression, keyed or not) writing `count` records to one of three topics.
A record's value is `<run>:<seq>` with seq counting up per run, so a consumer reading
Tansu directly can tell, per partition, whether records arrived once and in order.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from tests.readback import read_partitions

TOPIC_COUNT = 3
PARTITIONS = 6
KEY_SPACE = 40  # keyed runs spread over every partition, with repeats per key
CONSUME_TIMEOUT_S = 60.0


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


def consume_everything(upstream_bootstrap: str, topics: list[str]) -> dict[tuple[str, int], list[tuple[bytes | None, bytes]]]:
    """Read every partition of `topics` from the broker to its end (tests/readback.py).

    Returns (topic, partition) -> [(key, value)] in offset order.
    """
    records = read_partitions(upstream_bootstrap, [(t, p) for t in topics for p in range(PARTITIONS)],
                              timeout_s=CONSUME_TIMEOUT_S)
    return {tp: [(r.key, r.value) for r in rs] for tp, rs in records.items()}


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
