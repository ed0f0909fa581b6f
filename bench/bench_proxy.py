"""Throughput and delivery latency of one producer straight to Tansu versus through the proxy.

Strategy: one memory-backed Tansu broker and one `azsidecar proxy` process in front of
it, both local. The same confluent-kafka workload (1 KiB records, acks=all, idempotence
on, linger.ms=5) runs alternately against each, several rounds in one run, so drift of
the machine (other processes, CPU frequency) hits both sides alike. Each round uses a
fresh topic so both sides append to equally empty partitions. Latency is measured per
record from the produce() call to its delivery callback.

Besides throughput and latency it prints the CPU time per record of the process the
producer talks to (Tansu directly; the proxy alone when through it, Tansu's share not
included), which varies far less than wall-clock figures on a shared machine.

Two phases: "saturated" pushes records as fast as librdkafka takes them (throughput;
latency there is mostly queueing), "paced" sends at a fixed rate well below either
side's capacity (the latency the proxy adds to an unhurried producer).

With `--broker kafka` the broker side is the local three-node Apache Kafka cluster
(deploy/local/kafka_cluster.py, racks use1-az1..3) and the proxy runs in use1-az1 with no
agents, so its batches for other zones' leaders go direct: the proxy's pass-through cost in
front of real Kafka. "cpu" of the direct side is then the three JVMs together.

Usage:
  .venv/bin/python bench/bench_proxy.py [--records 30000] [--rounds 3] [--paced-rate 2000] [--broker kafka]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer

from deploy.local.processes import free_port, start_tansu, stop_process, wait_for_port

RECORD_BYTES = 1024
PARTITIONS = 6
FLUSH_TIMEOUT_S = 120.0
PROXY_STARTUP_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class RoundResult:
    target: str
    records: int
    elapsed_s: float
    latencies_ms: tuple[float, ...]
    server_cpu_s: float  # CPU time the broker-side process (Tansu or proxy) spent in the round

    @property
    def records_per_s(self) -> float:
        return self.records / self.elapsed_s

    @property
    def mb_per_s(self) -> float:
        return self.records * RECORD_BYTES / self.elapsed_s / 1e6


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def create_topic(bootstrap: str, partitions: int) -> str:
    from kafka.admin import KafkaAdminClient, NewTopic

    name = f"bench-{uuid.uuid4().hex[:10]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), request_timeout_ms=10_000)
    try:
        # -1: the broker's default replication factor (3 on the Kafka cluster, 1 on Tansu)
        admin.create_topics([NewTopic(name, partitions, -1 if "," in bootstrap else 1)], wait_for_metadata=True)
    finally:
        admin.close()
    return name


def cpu_seconds(pids: tuple[int, ...]) -> float:
    """User + system CPU time of the processes so far (Linux /proc)."""
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def run_round(target: str, bootstrap: str, topic: str, records: int, rate_per_s: float | None,
              server_pid: tuple[int, ...]) -> RoundResult:
    """Produce `records` 1 KiB records; at `rate_per_s` if given, else as fast as possible."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "queue.buffering.max.kbytes": 256 * 1024})
    producer.produce(topic, b"warm-up")  # connect, negotiate and get a producer id outside the clock
    assert producer.flush(30) == 0, f"{target}: warm-up record not delivered"
    latencies: list[float] = []
    failures: list = []
    value = b"v" * RECORD_BYTES

    def delivered(err, _msg, sent_at: float) -> None:
        if err is not None:
            failures.append(err)
        latencies.append((time.perf_counter() - sent_at) * 1000)

    cpu_before = cpu_seconds(server_pid)
    started = time.perf_counter()
    for i in range(records):
        if rate_per_s is not None:
            due = started + i / rate_per_s
            # Block in poll() until the record is due: a busy loop here would take a core
            # from the proxy on a small host and inflate exactly what is being measured.
            while (remaining := due - time.perf_counter()) > 0:
                producer.poll(remaining)
        sent_at = time.perf_counter()
        while True:
            try:
                producer.produce(topic, value, on_delivery=lambda err, msg, t=sent_at: delivered(err, msg, t))
                break
            except BufferError:
                producer.poll(0.001)  # local queue full: let deliveries drain
        producer.poll(0)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0, f"{target}: records left undelivered"
    elapsed = time.perf_counter() - started
    server_cpu_s = cpu_seconds(server_pid) - cpu_before
    assert not failures, f"{target}: {failures[:3]}"
    assert len(latencies) == records
    return RoundResult(target, records, elapsed, tuple(latencies), server_cpu_s)


def summarize(results: list[RoundResult], target: str) -> dict[str, float]:
    mine = [r for r in results if r.target == target]
    latencies = [x for r in mine for x in r.latencies_ms]
    return {
        "records_per_s": statistics.median(r.records_per_s for r in mine),
        "mb_per_s": statistics.median(r.mb_per_s for r in mine),
        "p50_ms": percentile(latencies, 0.50),
        "p99_ms": percentile(latencies, 0.99),
        "cpu_us_per_record": statistics.median(r.server_cpu_s / r.records * 1e6 for r in mine),
    }


def report(phase: str, results: list[RoundResult]) -> dict[str, dict[str, float]]:
    out = {t: summarize(results, t) for t in ("direct", "proxy")}
    print(f"\n== {phase} ==")
    for r in results:
        print(f"  {r.target:6s} {r.records:7d} records {r.elapsed_s:7.2f}s  {r.records_per_s:9.0f} rec/s "
              f"{r.mb_per_s:7.2f} MB/s  p50 {percentile(list(r.latencies_ms), 0.5):7.2f} ms "
              f"p99 {percentile(list(r.latencies_ms), 0.99):7.2f} ms  cpu {r.server_cpu_s / r.records * 1e6:6.1f} us/rec")
    for t, s in out.items():
        print(f"  {t:6s} median {s['records_per_s']:9.0f} rec/s {s['mb_per_s']:7.2f} MB/s   "
              f"p50 {s['p50_ms']:7.2f} ms  p99 {s['p99_ms']:7.2f} ms  cpu {s['cpu_us_per_record']:6.1f} us/rec")
    d, p = out["direct"], out["proxy"]
    print(f"  throughput ratio proxy/direct: {p['records_per_s'] / d['records_per_s']:.3f}   "
          f"p50 added: {p['p50_ms'] - d['p50_ms']:+.2f} ms   p99 added: {p['p99_ms'] - d['p99_ms']:+.2f} ms")
    return out


def run_phases(broker_bootstrap: str, targets: dict[str, tuple[str, tuple[int, ...]]], args: argparse.Namespace,
               report_phase: Callable[[str, list[RoundResult]], object]) -> None:
    """The saturated phase (and the paced one if --paced-rate > 0): --rounds rounds, each
    round every target in turn on a fresh topic, so machine drift hits all alike."""
    phases: list[tuple[str, int, float | None]] = [("saturated", args.records, None)]
    if args.paced_rate > 0:
        phases.append((f"paced at {args.paced_rate:.0f} records/s", args.paced_records, args.paced_rate))
    for phase, records, rate in phases:
        results = []
        for _ in range(args.rounds):
            for target, (bootstrap, pid) in targets.items():
                topic = create_topic(broker_bootstrap, PARTITIONS)
                results.append(run_round(target, bootstrap, topic, records, rate, pid))
        report_phase(phase, results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=30_000, help="records per saturated round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per side and phase (alternating)")
    parser.add_argument("--paced-rate", type=float, default=2000.0, help="records/s in the paced phase (0 = skip)")
    parser.add_argument("--paced-records", type=int, default=6000, help="records per paced round")
    parser.add_argument("--audit", choices=("on", "off"), default="on",
                        help="the proxy's audit trail (on is the default configuration)")
    parser.add_argument("--broker", choices=("tansu", "kafka"), default="tansu",
                        help="the broker side: one memory-backed Tansu, or the local three-node Apache Kafka")
    args = parser.parse_args(argv)

    log_dir = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    with contextlib.ExitStack() as stack:
        if args.broker == "kafka":
            from deploy.local.kafka_cluster import start_kafka_cluster  # noqa: PLC0415 - the JVM side only here

            cluster = stack.enter_context(start_kafka_cluster(log_dir=log_dir / "kafka"))
            bootstrap = cluster.bootstrap
            broker_pids = tuple(n.proc.pid for n in cluster.nodes.values() if n.proc is not None)
            what = f"Apache Kafka {cluster.version} (3 nodes)"
        else:
            tansu = stack.enter_context(start_tansu(log_dir=log_dir))
            bootstrap, broker_pids, what = tansu.bootstrap, (tansu.proc.pid,), "tansu"
        port = free_port()
        log_path = log_dir / "proxy.log"
        config_path = log_dir / "proxy.toml"
        config_path.write_text(f'[audit]\nenabled = {"true" if args.audit == "on" else "false"}\n'
                               f'output = "{log_dir / "audit"}"\n')
        with open(log_path, "wb") as out:
            proxy = subprocess.Popen(
                [sys.executable, "-m", "azsidecar", "proxy", "--listen", f"127.0.0.1:{port}",
                 "--bootstrap-servers", bootstrap, "--zone", "use1-az1", "--log-level", "WARNING",
                 "--config", str(config_path)],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for_port("127.0.0.1", port, proxy, PROXY_STARTUP_TIMEOUT_S, "azsidecar proxy", log_path)
            targets = {"direct": (bootstrap, broker_pids), "proxy": (f"127.0.0.1:{port}", (proxy.pid,))}
            print(f"{what} {bootstrap}, proxy 127.0.0.1:{port}; {RECORD_BYTES} B records, acks=all, "
                  f"idempotence on, linger.ms=5, {PARTITIONS} partitions, {args.rounds} rounds per side, "
                  f"proxy audit {args.audit}")
            run_phases(bootstrap, targets, args, report)
        finally:
            stop_process(proxy)
    return 0


if __name__ == "__main__":
    sys.exit(main())
