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
(deploy/local/kafka_cluster.py, racks use1-az1..3) and the proxy runs in use1-az1.
Routes (`--routes`, default local,wal with Kafka, local with Tansu):
  local  a proxy with no agents in front of topics whose every partition is led in its own
         zone (node 1): the same-zone pass-through;
  wal    a second proxy, `router.policy = "wal"`, in front of topics led in use1-az2
         (node 2): its batches go through a WAL object in moto and a notification to an
         agent of use1-az2 (`azsidecar agent`), which appends them. acks=all answers after
         the agent's append, as by default. Proxy and agent reach moto through a keep-alive
         front (deploy/local/s3_delay.py, no delay) that keeps their connections open
         between requests as S3 does; moto's own server closes every connection, so
         without it (`--moto-direct`, how this bench ran until 2026-12-02) every PUT and GET
         paid a TCP connect and close that a client of S3 pays once.
"direct" produces to the broker itself (topics led by node 1).

Rounds last --round-seconds each (saturated: as many records as the producer gets through
in that time); each round runs every target once, in an order reversed every other round,
so drift hits all alike; the summary gives medians over rounds and each route's ratio to
direct. CPU per MiB of record bytes, from /proc/<pid>/stat (user and kernel apart): the
proxy's, the client's (this process: librdkafka's threads), the broker's (the JVMs or
Tansu) and, for the WAL route, the agent's and S3's (moto's and the front's).

Usage:
  .venv/bin/python bench/bench_proxy.py [--round-seconds 5] [--rounds 3] [--paced-rate 2000] [--broker kafka]
      [--routes local,wal] [--moto-direct]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer

from deploy.local.processes import DUMMY_CREDENTIALS, free_port, start_moto, start_tansu, stop_process, wait_for_port
from deploy.local.s3_delay import keepalive_front
from deploy.local.sidecar_stack import to_toml

RECORD_BYTES = 1024
PARTITIONS = 6
FLUSH_TIMEOUT_S = 120.0
PROXY_STARTUP_TIMEOUT_S = 60.0
MiB = 1024 * 1024
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
HMAC_KEY = "bench-proxy-notify-key-0123456789"
LOCAL_NODE, WAL_NODE = 1, 2  # Kafka node ids: use1-az1 (the proxy's zone), use1-az2 (the agent's)


@dataclass(frozen=True)
class Cpu:
    """CPU seconds of some processes, user and kernel apart."""

    user_s: float = 0.0
    system_s: float = 0.0

    def __sub__(self, other: Cpu) -> Cpu:
        return Cpu(self.user_s - other.user_s, self.system_s - other.system_s)


@dataclass(frozen=True)
class Target:
    """Where a round's producer connects, and whose CPU is measured."""

    name: str
    bootstrap: str
    leader: int  # Kafka node that leads the round's topic (0: the broker's own choice, Tansu)
    pids: dict[str, tuple[int, ...]]  # role -> processes ("proxy", "broker", "agent", "s3")


@dataclass(frozen=True)
class RoundResult:
    target: str
    records: int
    elapsed_s: float
    latencies_ms: tuple[float, ...]
    cpu: dict[str, Cpu]  # role -> CPU spent in the round ("client": this process)

    @property
    def records_per_s(self) -> float:
        return self.records / self.elapsed_s

    @property
    def mb_per_s(self) -> float:
        return self.records * RECORD_BYTES / self.elapsed_s / 1e6

    def ms_per_mib(self, role: str) -> tuple[float, float]:
        """(user, kernel) ms of CPU per MiB of record bytes."""
        mib = self.records * RECORD_BYTES / MiB
        c = self.cpu.get(role, Cpu())
        return c.user_s * 1000 / mib, c.system_s * 1000 / mib


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def create_topic(bootstrap: str, partitions: int, leader: int = 0) -> str:
    """A fresh topic; with `leader`, every partition led by that node (replicas on all three)."""
    from kafka.admin import KafkaAdminClient, NewTopic

    name = f"bench-{uuid.uuid4().hex[:10]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), request_timeout_ms=10_000)
    try:
        if leader:
            others = [n for n in (1, 2, 3) if n != leader]
            topic = NewTopic(name, replica_assignments={p: [leader, *others] for p in range(partitions)})
        else:
            # -1: the broker's default replication factor (1 on Tansu)
            topic = NewTopic(name, num_partitions=partitions, replication_factor=-1)
        admin.create_topics([topic])
    finally:
        admin.close()
    return name


def cpu_of(pids: tuple[int, ...]) -> Cpu:
    """User and system CPU time of the processes so far (Linux /proc)."""
    user = system = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        user += int(fields[11])
        system += int(fields[12])
    return Cpu(user / CLOCK_TICKS, system / CLOCK_TICKS)


def cpu_seconds(pids: tuple[int, ...]) -> float:
    """User + system CPU time of the processes so far (Linux /proc)."""
    c = cpu_of(pids)
    return c.user_s + c.system_s


def run_round(target: Target, topic: str, seconds: float, rate_per_s: float | None) -> RoundResult:
    """Produce 1 KiB records for `seconds`: at `rate_per_s` if given, else as fast as possible."""
    producer = Producer({"bootstrap.servers": target.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "queue.buffering.max.kbytes": 256 * 1024})
    producer.produce(topic, b"warm-up")  # connect, negotiate and get a producer id outside the clock
    assert producer.flush(30) == 0, f"{target.name}: warm-up record not delivered"
    latencies: list[float] = []
    failures: list = []
    value = b"v" * RECORD_BYTES

    def delivered(err, _msg, sent_at: float) -> None:
        if err is not None:
            failures.append(err)
        latencies.append((time.perf_counter() - sent_at) * 1000)

    roles = {role: pids for role, pids in target.pids.items()}
    roles["client"] = (os.getpid(),)
    before = {role: cpu_of(pids) for role, pids in roles.items()}
    started = time.perf_counter()
    ends = started + seconds
    records = 0
    while (now := time.perf_counter()) < ends:
        if rate_per_s is not None:
            due = started + records / rate_per_s
            # Block in poll() until the record is due: a busy loop here would take a core
            # from the proxy on a small host and inflate exactly what is being measured.
            # poll() counts whole milliseconds (a shorter wait returns at once and spins).
            if due > now:
                producer.poll(max(due - now, 0.001))
                continue
        sent_at = time.perf_counter()
        try:
            producer.produce(topic, value, on_delivery=lambda err, msg, t=sent_at: delivered(err, msg, t))
        except BufferError:
            producer.poll(0.001)  # local queue full: let deliveries drain
            continue
        records += 1
        producer.poll(0)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0, f"{target.name}: records left undelivered"
    elapsed = time.perf_counter() - started
    cpu = {role: cpu_of(pids) - before[role] for role, pids in roles.items()}
    assert not failures, f"{target.name}: {failures[:3]}"
    assert len(latencies) == records
    return RoundResult(target.name, records, elapsed, tuple(latencies), cpu)


def summarize(results: list[RoundResult], target: str) -> dict[str, float]:
    mine = [r for r in results if r.target == target]
    latencies = [x for r in mine for x in r.latencies_ms]
    out = {
        "records_per_s": statistics.median(r.records_per_s for r in mine),
        "mb_per_s": statistics.median(r.mb_per_s for r in mine),
        "p50_ms": percentile(latencies, 0.50),
        "p99_ms": percentile(latencies, 0.99),
    }
    for role in mine[0].cpu:
        out[f"{role}_user_ms_per_mib"] = statistics.median(r.ms_per_mib(role)[0] for r in mine)
        out[f"{role}_sys_ms_per_mib"] = statistics.median(r.ms_per_mib(role)[1] for r in mine)
    return out


ROLES = ("proxy", "client", "broker", "agent", "s3")


def report(phase: str, results: list[RoundResult]) -> dict[str, dict[str, float]]:
    targets = list(dict.fromkeys(r.target for r in results))
    out = {t: summarize(results, t) for t in targets}
    print(f"\n== {phase} ==")
    for r in results:
        print(f"  {r.target:6s} {r.records:7d} records {r.elapsed_s:6.2f}s {r.records_per_s:8.0f} rec/s "
              f"{r.mb_per_s:7.2f} MB/s  p50 {percentile(list(r.latencies_ms), 0.5):7.2f} ms "
              f"p99 {percentile(list(r.latencies_ms), 0.99):7.2f} ms  proxy "
              + ("{:.2f}+{:.2f} ms/MiB".format(*r.ms_per_mib("proxy")) if "proxy" in r.cpu else "-"))
    print("  median over rounds; CPU in ms per MiB of record bytes, user+kernel:")
    print(f"  {'':6s} {'MB/s':>7s} {'x direct':>9s} {'p50 ms':>8s} {'p99 ms':>8s} {'+p50':>7s}"
          + "".join(f"{role:>15s}" for role in ROLES))
    direct = out.get("direct")
    for t, s in out.items():
        ratio = s["records_per_s"] / direct["records_per_s"] if direct else float("nan")
        added = s["p50_ms"] - direct["p50_ms"] if direct else float("nan")
        cells = "".join(f"{s[f'{role}_user_ms_per_mib']:>7.2f}+{s[f'{role}_sys_ms_per_mib']:<7.2f}"
                        if f"{role}_user_ms_per_mib" in s else f"{'-':>15s}" for role in ROLES)
        print(f"  {t:6s} {s['mb_per_s']:7.2f} {ratio:9.3f} {s['p50_ms']:8.2f} {s['p99_ms']:8.2f} {added:+7.2f}{cells}")
    return out


def run_phases(broker_bootstrap: str, targets: list[Target], args: argparse.Namespace,
               report_phase: Callable[[str, list[RoundResult]], object]) -> None:
    """The saturated phase (and the paced one if --paced-rate > 0): --rounds rounds, each
    round every target once on a fresh topic, the order reversed every other round."""
    phases: list[tuple[str, float | None]] = [("saturated", None)]
    if args.paced_rate > 0:
        phases.append((f"paced at {args.paced_rate:.0f} records/s", args.paced_rate))
    for phase, rate in phases:
        results = []
        for r in range(args.rounds):
            for target in (targets if r % 2 == 0 else targets[::-1]):
                topic = create_topic(broker_bootstrap, PARTITIONS, target.leader)
                results.append(run_round(target, topic, args.round_seconds, rate))
        report_phase(phase, results)


@contextlib.contextmanager
def sidecar_process(kind: str, config: dict, log_dir: Path, name: str, port: int,
                    tree: Path | None = None) -> Iterator[subprocess.Popen]:
    """`azsidecar <kind> --config` with `config` (TOML), once it accepts on `port`; stopped on
    exit. `tree`: run that checkout's sources (its directory on PYTHONPATH), not this one's."""
    config_path = log_dir / f"{name}.toml"
    config_path.write_text(to_toml(config))
    log_path = log_dir / f"{name}.log"
    env = {**os.environ, **DUMMY_CREDENTIALS, "AZSIDECAR_NOTIFY_HMAC_KEYS": HMAC_KEY, "AWS_DEFAULT_REGION": "us-east-1"}
    if tree is not None:
        env["PYTHONPATH"] = str(tree.resolve())
    argv = [sys.executable, "-m", "azsidecar", kind, "--config", str(config_path)]
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(argv + (["--log-level", "WARNING"] if kind == "proxy" else []),
                                cwd=tree.resolve() if tree is not None else None,
                                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_for_port("127.0.0.1", port, proc, PROXY_STARTUP_TIMEOUT_S, f"azsidecar {kind} ({name})", log_path)
        yield proc
    finally:
        stop_process(proc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--round-seconds", type=float, default=5.0, help="seconds per round (saturated and paced)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per target and phase (alternating)")
    parser.add_argument("--paced-rate", type=float, default=2000.0, help="records/s in the paced phase (0 = skip)")
    parser.add_argument("--audit", choices=("on", "off"), default="on",
                        help="the proxies' audit trail (on is the default configuration)")
    parser.add_argument("--broker", choices=("tansu", "kafka"), default="tansu",
                        help="the broker side: one memory-backed Tansu, or the local three-node Apache Kafka")
    parser.add_argument("--routes", default=None,
                        help="proxy routes to compare with direct: local, wal (Kafka only); default: all there are")
    parser.add_argument("--moto-direct", action="store_true",
                        help="the WAL route's proxy and agent talk to moto directly, a new connection per "
                             "request (moto's server closes each one); by default through a keep-alive front "
                             "(deploy/local/s3_delay.py, no delay), as S3 keeps connections open")
    args = parser.parse_args(argv)
    routes = (args.routes or ("local,wal" if args.broker == "kafka" else "local")).split(",")
    if not set(routes) <= {"local", "wal"} or ("wal" in routes and args.broker != "kafka"):
        parser.error("--routes: local and/or wal (wal needs --broker kafka)")
    if args.round_seconds <= 0 or args.rounds < 1:
        parser.error("--round-seconds: positive; --rounds: at least 1")

    log_dir = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    with contextlib.ExitStack() as stack:
        # The brokers' data (GBs after a saturated run) goes once they have stopped; the
        # processes' logs stay in log_dir.
        stack.callback(shutil.rmtree, log_dir / "kafka", True)
        if args.broker == "kafka":
            from deploy.local.kafka_cluster import start_kafka_cluster  # noqa: PLC0415 - the JVM side only here

            cluster = stack.enter_context(start_kafka_cluster(log_dir=log_dir / "kafka"))
            bootstrap = cluster.bootstrap
            broker_pids = tuple(n.proc.pid for n in cluster.nodes.values() if n.proc is not None)
            what = f"Apache Kafka {cluster.version} (3 nodes)"
            local_leader = LOCAL_NODE
        else:
            tansu = stack.enter_context(start_tansu(log_dir=log_dir))
            bootstrap, broker_pids, what = tansu.bootstrap, (tansu.proc.pid,), "tansu"
            local_leader = 0
        audit = {"enabled": args.audit == "on", "output": str(log_dir / "audit")}
        targets = [Target("direct", bootstrap, local_leader, {"broker": broker_pids})]
        if "local" in routes:
            port = free_port()
            proxy = stack.enter_context(sidecar_process("proxy", {
                "zone": "use1-az1", "proxy": {"listen_host": "127.0.0.1", "listen_port": port},
                "upstream": {"bootstrap_servers": bootstrap.split(",")}, "audit": audit,
            }, log_dir, "proxy-local", port))
            targets.append(Target("local", f"127.0.0.1:{port}", local_leader,
                                  {"proxy": (proxy.pid,), "broker": broker_pids}))
        if "wal" in routes:
            moto = stack.enter_context(start_moto(log_dir=log_dir))
            bucket = "bench-proxy-wal"
            moto.create_bucket(bucket)
            s3_url, s3_pids = moto.endpoint_url, (moto.proc.pid,)
            if not args.moto_direct:  # connections kept open between requests, as S3 does
                s3_url, s3_pid_list = stack.enter_context(keepalive_front(moto, log_dir))
                s3_pids = tuple(s3_pid_list)
            agent_port, port = free_port(), free_port()
            wal = {"bucket": bucket, "region": "us-east-1", "prefix": "wal/", "endpoint_url": s3_url}
            agent = stack.enter_context(sidecar_process("agent", {
                "zone": "use1-az2", "upstream": {"bootstrap_servers": bootstrap.split(",")}, "wal": wal,
                "agent": {"listen_host": "127.0.0.1", "listen_port": agent_port}, "audit": audit,
            }, log_dir, "agent-wal", agent_port))
            proxy_wal = stack.enter_context(sidecar_process("proxy", {
                "zone": "use1-az1", "proxy": {"listen_host": "127.0.0.1", "listen_port": port},
                "upstream": {"bootstrap_servers": bootstrap.split(",")}, "router": {"policy": "wal"}, "wal": wal,
                "notify": {"agents": {"use1-az2": f"127.0.0.1:{agent_port}"}}, "audit": audit,
            }, log_dir, "proxy-wal", port))
            targets.append(Target("wal", f"127.0.0.1:{port}", WAL_NODE,
                                  {"proxy": (proxy_wal.pid,), "broker": broker_pids, "agent": (agent.pid,),
                                   "s3": s3_pids}))
        print(f"{what} {bootstrap}; {RECORD_BYTES} B records, acks=all, idempotence on, linger.ms=5, "
              f"{PARTITIONS} partitions, {args.rounds} rounds of {args.round_seconds:g} s per target, "
              f"proxy audit {args.audit}; targets {', '.join(t.name for t in targets)}")
        run_phases(bootstrap, targets, args, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
