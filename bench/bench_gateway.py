"""Zone gateway throughput: direct to Tansu vs one gateway process with 1 and with 2 workers.

Strategy: one memory-backed Tansu broker; two `azsidecar proxy` gateways in front of it,
one with `proxy.workers = 1`, one with `proxy.workers = 2` (SO_REUSEPORT). Several
confluent-kafka producers at once (a gateway serves many producers; SO_REUSEPORT spreads
connections, not requests) send 1 KiB records, acks=all, idempotence on, linger.ms=5,
as fast as they go; rounds alternate direct / 1 worker / 2 workers so machine drift hits
all three alike. Reported per target: MB/s (median of rounds) and the CPU time per MB of
the processes the producers talk to (Tansu for direct; the gateway's supervisor and
workers, Tansu excluded, for the gateways), which varies less than wall-clock figures.

Same-zone traffic only (no agents): this measures the proxy's own cost per byte.

Usage:
  .venv/bin/python bench/bench_gateway.py [--records 300000] [--producers 4] [--rounds 5]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer

from bench.bench_proxy import RECORD_BYTES, cpu_seconds, create_topic
from deploy.local.processes import free_port, start_tansu, stop_process, wait_for_port

PARTITIONS = 6
FLUSH_TIMEOUT_S = 120.0
STARTUP_TIMEOUT_S = 60.0


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of a process and its direct children (a supervisor and its workers)."""
    total = cpu_seconds(pid)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            total += cpu_seconds(int(stat.parent.name))
    return total


def produce(bootstrap: str, topic: str, records: int, failures: list) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "queue.buffering.max.kbytes": 128 * 1024})
    value = b"v" * RECORD_BYTES

    def delivered(err, _msg) -> None:
        if err is not None:
            failures.append(err)

    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.001)  # local queue full: let deliveries drain
        producer.poll(0)
    if producer.flush(FLUSH_TIMEOUT_S) != 0:
        failures.append("records left undelivered")


def run_round(bootstrap: str, topic: str, records: int, producers: int, pid: int) -> tuple[float, float]:
    """(MB/s, CPU seconds per MB of the serving processes) for `records` split over `producers`."""
    failures: list = []
    warm = Producer({"bootstrap.servers": bootstrap})
    warm.produce(topic, b"warm-up")
    assert warm.flush(30) == 0, "warm-up record not delivered"
    threads = [threading.Thread(target=produce, args=(bootstrap, topic, records // producers, failures))
               for _ in range(producers)]
    cpu_before = tree_cpu_seconds(pid)
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    cpu = tree_cpu_seconds(pid) - cpu_before
    assert not failures, failures[:3]
    mb = records // producers * producers * RECORD_BYTES / 1e6
    return mb / elapsed, cpu / mb


def start_gateway(log_dir: Path, bootstrap: str, workers: int) -> tuple[subprocess.Popen, int]:
    port = free_port()
    config = log_dir / f"gateway-{workers}.toml"
    config.write_text(f'zone = "use1-az1"\n[upstream]\nbootstrap_servers = ["{bootstrap}"]\n'
                      f'[proxy]\nlisten_host = "127.0.0.1"\nlisten_port = {port}\nproxy_id = "bench-w{workers}"\n'
                      f'workers = {workers}\n[audit]\noutput = "{log_dir / f"audit-{workers}"}"\n[authz]\nsource = "none"\n')
    log = log_dir / f"gateway-{workers}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "azsidecar", "proxy", "--config", str(config),
                                 "--log-level", "INFO"], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_port("127.0.0.1", port, proc, STARTUP_TIMEOUT_S, f"gateway with {workers} workers", log)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while len(re.findall(r"proxy bench-w\d+(-w\d)? listening", log.read_text())) < workers:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.1)  # polling the log for every worker's readiness, bounded
    except BaseException:
        stop_process(proc)
        raise
    return proc, port


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=300_000, help="records per round, all producers together (rounds of ~1 s at least)")
    parser.add_argument("--producers", type=int, default=4, help="concurrent producers (connections)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per target (alternating)")
    args = parser.parse_args(argv)
    log_dir = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    with start_tansu(log_dir=log_dir) as tansu:
        gateways = [start_gateway(log_dir, tansu.bootstrap, w) for w in (1, 2)]
        try:
            targets = {"direct": (tansu.bootstrap, tansu.proc.pid),
                       "gateway 1 worker": (f"127.0.0.1:{gateways[0][1]}", gateways[0][0].pid),
                       "gateway 2 workers": (f"127.0.0.1:{gateways[1][1]}", gateways[1][0].pid)}
            print(f"{args.records} x {RECORD_BYTES} B records per round over {args.producers} producers, acks=all, "
                  f"idempotence, linger.ms=5, {PARTITIONS} partitions, {args.rounds} rounds per target")
            results: dict[str, list[tuple[float, float]]] = {t: [] for t in targets}
            for _ in range(args.rounds):
                for target, (bootstrap, pid) in targets.items():
                    topic = create_topic(tansu.bootstrap, PARTITIONS)
                    mbps, cpu_per_mb = run_round(bootstrap, topic, args.records, args.producers, pid)
                    results[target].append((mbps, cpu_per_mb))
                    print(f"  {target:18s} {mbps:8.2f} MB/s  cpu {cpu_per_mb * 1000:7.1f} ms/MB", flush=True)
            direct = statistics.median(m for m, _ in results["direct"])
            print("median:")
            for target, rows in results.items():
                mbps = statistics.median(m for m, _ in rows)
                cpu = statistics.median(c for _, c in rows)
                print(f"  {target:18s} {mbps:8.2f} MB/s ({mbps / direct:.2f}x direct)  cpu {cpu * 1000:7.1f} ms/MB")
        finally:
            for proc, _ in gateways:
                stop_process(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
