"""Latency the same-zone proxy adds to a paced producer, direct and proxied in short alternating slots.

Why a bench of its own: producing straight to the local Apache Kafka cluster, a paced
producer's p50 moves by several milliseconds between rounds of a few seconds on this
two-core host, so bench_proxy.py's paced phase (rounds of seconds, medians of three)
cannot read a difference of 0.3 ms. Two producers at the same time do not help either:
the proxy's work for one record then delays the direct producer's twin on the same two
cores, which hid most of the difference (the first design of this bench read +0.1 ms).

Here two confluent-kafka producers with the same settings stay connected for the whole run,
one to the cluster, one to an `azsidecar proxy` in use1-az1 in front of it, each with a topic
of its own (every partition led by node 1, in use1-az1: the local route). They take turns in
slots of --slot-seconds (1.5 s by default): direct, proxy, proxy, direct, ... so each pair of
neighbouring slots meets nearly the same host, and only one producer runs at a time. A
record's latency is librdkafka's own (`Message.latency()`: from produce() until its broker
thread received the acknowledgement), so how soon this loop polls does not enter it.

Printed: each side's p50 / p99 over all its slots, their difference, and the median (with
p25 and p75) of the per-cycle differences of slot medians (a cycle: one slot of each side,
here a pair), the figure least moved by drift.
At 100 records/s with linger.ms 5 each request carries one record: the proxy's cost per
request, not per byte, is what the producer meets.

With `--trees OLD,NEW` (checkouts of the project, e.g. `git worktree add /tmp/before
<commit>`) one proxy runs from each tree, and the slots go round direct and every proxy in
turn, the order rotated and reversed from cycle to cycle: each tree's added latency is read
against the same direct slots, so a change's effect is not lost in the ~0.15 ms by which
whole runs of this bench differ.

Usage:
  .venv/bin/python bench/bench_added_latency.py [--rate 100] [--slots 30] [--slot-seconds 1.5]
      [--acks all|1] [--idempotence on|off] [--linger-ms 5] [--record-bytes 1024] [--trees OLD,NEW]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer  # noqa: E402

from bench.bench_proxy import LOCAL_NODE, PARTITIONS, create_topic, percentile, sidecar_process  # noqa: E402
from bench.bench_proxy_trees import proxy_from  # noqa: E402
from deploy.local.processes import free_port  # noqa: E402

FLUSH_TIMEOUT_S = 60.0
WARM_RECORDS = 2  # a slot's first records after the other side's turn: not counted


def producer(bootstrap: str, args: argparse.Namespace) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "acks": args.acks, "enable.idempotence": args.idempotence == "on",
                     "linger.ms": args.linger_ms})


def run_slot(p: Producer, topic: str, args: argparse.Namespace) -> list[float]:
    """Paced records for one slot; their latencies (ms), in the order produced."""
    latencies: dict[int, float] = {}
    failures: list[str] = []

    def delivered(k: int, err, msg) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            latencies[k] = msg.latency() * 1000

    value = b"v" * args.record_bytes
    count = int(args.rate * args.slot_seconds)
    started = time.perf_counter()
    for k in range(count):
        due = started + k / args.rate
        # Blocking in poll() until the tick: a busy loop would take a core from the proxy.
        # poll() counts whole milliseconds (hence up to 2 ms early); latencies do not depend on it.
        while (wait := due - time.perf_counter()) >= 0.002:
            p.poll(wait)
        p.produce(topic, value, partition=k % PARTITIONS, on_delivery=lambda err, msg, i=k: delivered(i, err, msg))
        p.poll(0)
    assert p.flush(FLUSH_TIMEOUT_S) == 0, "records left undelivered"
    assert not failures, failures[:3]
    assert len(latencies) == count, f"{len(latencies)} of {count} delivered"
    return [latencies[k] for k in range(WARM_RECORDS, count)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=100.0, help="records/s while a side has its slot")
    parser.add_argument("--slots", type=int, default=30, help="slots in all, half each side (even)")
    parser.add_argument("--slot-seconds", type=float, default=1.5)
    parser.add_argument("--acks", choices=("all", "1"), default="all")
    parser.add_argument("--idempotence", choices=("on", "off"), default="on", help="on needs --acks all")
    parser.add_argument("--linger-ms", type=float, default=5.0)
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--trees", default=None,
                        help="comma-separated checkouts: one proxy from each (default: one from this tree)")
    args = parser.parse_args(argv)
    trees = [Path(t) for t in args.trees.split(",")] if args.trees else []
    sides_count = 1 + max(1, len(trees))
    if args.rate <= 0 or args.slot_seconds <= 0 or args.record_bytes < 1:
        parser.error("--rate, --slot-seconds, --record-bytes: positive")
    if args.slots < sides_count or args.slots % sides_count:
        parser.error(f"--slots: a multiple of the sides ({sides_count}: direct and each proxy)")
    if args.rate * args.slot_seconds <= WARM_RECORDS + 1:
        parser.error(f"--rate x --slot-seconds: more than {WARM_RECORDS + 1} records a slot")
    if args.idempotence == "on" and args.acks != "all":
        parser.error("--idempotence on needs --acks all (librdkafka refuses it otherwise)")
    missing = [str(t) for t in trees if not (t / "azsidecar" / "__main__.py").is_file()]
    if missing:
        parser.error(f"--trees: not checkouts of the project: {missing}")

    from deploy.local.kafka_cluster import start_kafka_cluster  # noqa: PLC0415 - starts JVMs

    log_dir = Path(tempfile.mkdtemp(prefix="bench-added-latency-"))
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, log_dir / "kafka", True)
        cluster = stack.enter_context(start_kafka_cluster(log_dir=log_dir / "kafka"))
        sides = {"direct": cluster.bootstrap}
        if trees:
            for tree in trees:
                _proc, tree_port = stack.enter_context(proxy_from(tree, cluster.bootstrap, log_dir, True))
                sides[f"proxy {tree}"] = f"127.0.0.1:{tree_port}"
        else:
            port = free_port()
            stack.enter_context(sidecar_process("proxy", {
                "zone": "use1-az1", "proxy": {"listen_host": "127.0.0.1", "listen_port": port},
                "upstream": {"bootstrap_servers": cluster.bootstrap.split(",")},
                "audit": {"output": str(log_dir / "audit")},
            }, log_dir, "proxy-local", port))
            sides["proxy"] = f"127.0.0.1:{port}"
        topics = {name: create_topic(cluster.bootstrap, PARTITIONS, LOCAL_NODE) for name in sides}
        producers = {name: producer(bootstrap, args) for name, bootstrap in sides.items()}
        for name, p in producers.items():  # connect, negotiate and get a producer id outside the clock
            p.produce(topics[name], b"warm-up")
            assert p.flush(30) == 0, f"{name}: warm-up record not delivered"
        print(f"Apache Kafka {cluster.version} (3 nodes, racks use1-az1..3); {len(sides) - 1} proxy(ies) in use1-az1; "
              f"topics led by node {LOCAL_NODE}, {PARTITIONS} partitions; {args.record_bytes} B records at "
              f"{args.rate:g}/s, acks={args.acks}, idempotence {args.idempotence}, linger.ms={args.linger_ms:g}; "
              f"{args.slots} slots of {args.slot_seconds:g} s, one producer at a time; load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        names = list(sides)
        latencies: dict[str, list[float]] = {name: [] for name in names}
        cycle_differences: dict[str, list[float]] = {name: [] for name in names[1:]}
        for cycle in range(args.slots // len(names)):
            shift = (cycle // 2) % len(names)
            order = names[shift:] + names[:shift]
            if cycle % 2:
                order.reverse()
            medians = {}
            for name in order:
                got = run_slot(producers[name], topics[name], args)
                latencies[name] += got
                medians[name] = statistics.median(got)
            for name in names[1:]:
                cycle_differences[name].append(medians[name] - medians["direct"])
        p50 = {name: percentile(v, 0.50) for name, v in latencies.items()}
        p99 = {name: percentile(v, 0.99) for name, v in latencies.items()}
        print(f"  direct p50 {p50['direct']:.2f} p99 {p99['direct']:.2f} ms")
        for name in names[1:]:
            differences = cycle_differences[name]
            print(f"  {name} p50 {p50[name]:.2f} p99 {p99[name]:.2f} ms | added p50 {p50[name] - p50['direct']:+.2f} ms, "
                  f"p99 {p99[name] - p99['direct']:+.2f} ms")
            print(f"  per cycle of slots, {name} minus direct (slot medians): p25 {percentile(differences, 0.25):+.2f} / "
                  f"median {statistics.median(differences):+.2f} / p75 {percentile(differences, 0.75):+.2f} ms "
                  f"over {len(differences)} cycles")
        print(f"  load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
