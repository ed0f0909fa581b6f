"""The proxy's CPU per produce request, before and after a change: proxies run from two
source trees side by side, in front of one local Apache Kafka cluster.

Strategy: the proxy's CPU follows the produce requests it handles, not the records or
bytes in them (a paced producer at 1,000 records/s of 1 KiB with linger 5 ms sends ~8
records per request; at 3,000/s ~23, for about the same CPU per request). So the figure
that shows a hot-path change is CPU per request, counted from librdkafka's own statistics
(requests sent to the proxy). One proxy per tree (`--trees OLD,NEW`: checkouts of the
project, e.g. `git worktree add /tmp/before <commit>`), each started from its tree with this
virtualenv's Python, all in use1-az1 in front of the same three-node cluster; every round
runs the same paced confluent-kafka producer (acks=all, idempotent) through each proxy in
turn, the order reversed every other round, each on a fresh topic whose six partitions are
led by node 1 (the local route). CPU from /proc/<pid>/stat of the proxy alone.

Prints per tree the median over rounds of CPU per request (user and kernel apart) and per
record, each tree's ratio to the first, and the median of the per-round ratios of user CPU
(each round runs the trees back to back, so the host's drift between rounds cancels). With
`--rate 0` the producer is not paced but saturates the proxy (records as fast as librdkafka
takes them, ~1 MB requests with `--linger-ms 50`): the figure is then CPU per MiB of record
bytes (user and kernel apart), where per-byte work such as receiving large frames shows.

`--route wal`: the proxies send every batch through the WAL instead (`router.policy = "wal"`,
each its own `proxy_id`), to one agent in use1-az2 run from this checkout, over moto
behind a keep-alive front (deploy/local/s3_delay.py, no delay); the
topics are led by node 2. The proxy's figure then includes encoding its objects, their PUTs
and the notifications.

Usage:
  .venv/bin/python bench/bench_proxy_trees.py --trees /tmp/before,. [--rate 1000] [--linger-ms 5]
      [--round-seconds 15] [--rounds 3] [--audit on|off]
  saturated: .venv/bin/python bench/bench_proxy_trees.py --trees /tmp/before,. --rate 0 --linger-ms 50
  WAL route: add --route wal; several producers taking turns: --producers 4
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer  # noqa: E402

from bench.bench_agent import process_minor_faults  # noqa: E402
from bench.bench_proxy import (  # noqa: E402
    HMAC_KEY,
    LOCAL_NODE,
    PARTITIONS,
    RECORD_BYTES,
    WAL_NODE,
    Cpu,
    cpu_of,
    create_topic,
    sidecar_process,
)
from deploy.local.kafka_cluster import start_kafka_cluster  # noqa: E402
from deploy.local.processes import DUMMY_CREDENTIALS, free_port, start_moto, stop_process, wait_for_port  # noqa: E402
from deploy.local.s3_delay import keepalive_front  # noqa: E402
from deploy.local.sidecar_stack import to_toml  # noqa: E402

STARTUP_TIMEOUT_S = 60.0
FLUSH_TIMEOUT_S = 60.0
STATS_INTERVAL_MS = 500


@dataclass(frozen=True)
class Round:
    tree: str
    requests: int
    records: int
    cpu: Cpu
    faults: int  # the proxy's minor page faults: first touches of fresh memory
    agent_cpu: Cpu | None = None  # the WAL route's agent, over the same round
    agent_faults: int = 0

    def per_request_us(self) -> tuple[float, float]:
        return self.cpu.user_s * 1e6 / self.requests, self.cpu.system_s * 1e6 / self.requests

    def per_record_us(self) -> float:
        return (self.cpu.user_s + self.cpu.system_s) * 1e6 / self.records

    def mib(self) -> float:
        return self.records * RECORD_BYTES / (1024 * 1024)

    def per_mib_ms(self) -> tuple[float, float]:
        return self.cpu.user_s * 1e3 / self.mib(), self.cpu.system_s * 1e3 / self.mib()

    def agent_per_mib(self) -> str:
        """The agent's user + kernel ms and page faults per MiB ('' without an agent)."""
        if self.agent_cpu is None:
            return ""
        return (f"; agent {self.agent_cpu.user_s * 1e3 / self.mib():.2f} + "
                f"{self.agent_cpu.system_s * 1e3 / self.mib():.2f} ms per MiB, "
                f"{self.agent_faults / self.mib():.1f} page faults per MiB")


@contextlib.contextmanager
def proxy_from(tree: Path, bootstrap: str, log_dir: Path, audit: bool,
               wal_route: dict | None = None) -> Iterator[tuple[subprocess.Popen, int]]:
    """`azsidecar proxy` run from `tree`'s sources in use1-az1; stopped on exit. Without
    `wal_route` it has no agents (every batch of a topic led in its zone goes the local
    route); with it, the config sections that send every batch through the WAL."""
    port = free_port()
    name = tree.resolve().name or "root"
    config = {"zone": "use1-az1", "proxy": {"listen_host": "127.0.0.1", "listen_port": port,
                                            "proxy_id": f"proxy-{port}"},
              "upstream": {"bootstrap_servers": bootstrap.split(",")},
              "audit": {"enabled": audit, "output": str(log_dir / f"audit-{name}-{port}")},
              **(wal_route or {})}
    config_path = log_dir / f"proxy-{name}-{port}.toml"
    config_path.write_text(to_toml(config))
    log_path = log_dir / f"proxy-{name}-{port}.log"
    env = {**os.environ, **DUMMY_CREDENTIALS, "AZSIDECAR_NOTIFY_HMAC_KEYS": HMAC_KEY,
           "AWS_DEFAULT_REGION": "us-east-1", "PYTHONPATH": str(tree.resolve())}
    with open(log_path, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "azsidecar", "proxy", "--config", str(config_path),
                                 "--log-level", "WARNING"], cwd=tree.resolve(), stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_for_port("127.0.0.1", port, proc, STARTUP_TIMEOUT_S, f"proxy from {tree}", log_path)
        yield proc, port
    finally:
        stop_process(proc)


def start_wal_side(stack: contextlib.ExitStack, bootstrap: str, log_dir: Path, audit: bool) -> tuple[dict, int]:
    """moto with a bucket behind a keep-alive front (S3 keeps connections open; moto's server
    closes each one) and one agent in use1-az2 (from this checkout) for the proxies to
    notify; returns the proxies' config sections for the WAL route and the agent's pid."""
    moto = stack.enter_context(start_moto(log_dir=log_dir))
    bucket = "bench-proxy-trees-wal"
    moto.create_bucket(bucket)
    s3_url, _pids = stack.enter_context(keepalive_front(moto, log_dir))
    wal = {"bucket": bucket, "region": "us-east-1", "prefix": "wal/", "endpoint_url": s3_url}
    agent_port = free_port()
    agent = stack.enter_context(sidecar_process("agent", {
        "zone": "use1-az2", "upstream": {"bootstrap_servers": bootstrap.split(",")}, "wal": wal,
        "agent": {"listen_host": "127.0.0.1", "listen_port": agent_port},
        "audit": {"enabled": audit, "output": str(log_dir / "audit-agent")},
    }, log_dir, "agent-wal", agent_port))
    return ({"router": {"policy": "wal"}, "wal": wal, "notify": {"agents": {"use1-az2": f"127.0.0.1:{agent_port}"}}},
            agent.pid)


def run_round(tree: str, pid: int, port: int, topic: str, rate: float, seconds: float, linger_ms: int,
              producers: int = 1, agent_pid: int | None = None) -> Round:
    """Records at `rate` for `seconds` through the proxy on `port`, from `producers` producers
    in turn (each its own connections and in-flight window); its CPU, page faults and the
    requests it got (and the agent's CPU and page faults, given its pid)."""
    stats: list[list[dict]] = [[] for _ in range(producers)]
    clients = [Producer({"bootstrap.servers": f"127.0.0.1:{port}", "acks": "all", "enable.idempotence": True,
                         "linger.ms": linger_ms, "batch.size": 1_000_000,
                         "statistics.interval.ms": STATS_INTERVAL_MS,
                         "stats_cb": lambda s, mine=mine: mine.append(json.loads(s))})
               for mine in stats]

    def requests_sent() -> int:
        total = 0
        for producer, mine in zip(clients, stats, strict=True):
            count = len(mine)
            deadline = time.monotonic() + 5 * STATS_INTERVAL_MS / 1000
            while len(mine) == count and time.monotonic() < deadline:  # a report taken after now
                producer.poll(0.05)
            total += sum(b["tx"] for b in mine[-1]["brokers"].values())
        return total

    for producer in clients:  # connect and get a producer id outside the count
        producer.produce(topic, b"warm-up")
        if producer.flush(FLUSH_TIMEOUT_S):
            raise RuntimeError(f"warm-up record through the proxy of {tree} not delivered")
    sent_before, cpu_before, faults_before = requests_sent(), cpu_of((pid,)), process_minor_faults(pid)
    agent_before = None if agent_pid is None else (cpu_of((agent_pid,)), process_minor_faults(agent_pid))
    value = b"v" * RECORD_BYTES
    start = time.perf_counter()
    records = turn = 0
    while (now := time.perf_counter()) - start < seconds:
        producer = clients[turn % producers]
        turn += 1  # each record goes to the next producer; a full one passes its turn on
        if rate <= 0:  # saturated: as fast as the producers' queues take them
            try:
                producer.produce(topic, value)
                records += 1
            except BufferError:
                producer.poll(0.001)
            continue
        due = start + records / rate
        if due > now:
            producer.poll(max(due - now, 0.001))  # poll counts whole milliseconds
            continue
        producer.produce(topic, value)
        records += 1
        producer.poll(0)
    for producer in clients:
        if producer.flush(FLUSH_TIMEOUT_S):
            raise RuntimeError(f"records through the proxy of {tree} not delivered within {FLUSH_TIMEOUT_S} s")
    cpu_after, faults_after, sent_after = cpu_of((pid,)), process_minor_faults(pid), requests_sent()
    agent = {}
    if agent_pid is not None and agent_before is not None:  # every notification of the round answered
        agent = {"agent_cpu": cpu_of((agent_pid,)) - agent_before[0],
                 "agent_faults": process_minor_faults(agent_pid) - agent_before[1]}
    return Round(tree, sent_after - sent_before, records, cpu_after - cpu_before, faults_after - faults_before,
                 **agent)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", required=True, help="comma-separated checkouts; the first is the baseline")
    parser.add_argument("--rate", type=float, default=1000.0, help="records/s of 1 KiB (0: saturated, unpaced)")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--round-seconds", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--audit", choices=("on", "off"), default="on")
    parser.add_argument("--producers", type=int, default=1,
                        help="producers taking turns record by record, each with its own connections and "
                             "in-flight window (librdkafka sends at most 5 requests at a time per connection)")
    parser.add_argument("--route", choices=("local", "wal"), default="local",
                        help="local: topics led in the proxies' zone; wal: every batch through the WAL to an agent")
    args = parser.parse_args(argv)
    trees = [Path(t) for t in args.trees.split(",")]
    missing = [str(t) for t in trees if not (t / "azsidecar" / "__main__.py").is_file()]
    if args.producers < 1:
        parser.error("--producers: at least 1")
    if len(trees) < 2 or missing:
        parser.error(f"--trees: two or more checkouts of the project (not one: {missing or trees})")

    log_dir = Path(tempfile.mkdtemp(prefix="bench-proxy-trees-"))
    print(f"load average at start: {os.getloadavg()[0]:.2f}; logs in {log_dir}", flush=True)
    rounds: list[Round] = []
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(start_kafka_cluster(log_dir=log_dir / "kafka"))
        wal_route, leader, agent_pid = None, LOCAL_NODE, None
        if args.route == "wal":
            (wal_route, agent_pid), leader = start_wal_side(stack, cluster.bootstrap, log_dir, args.audit == "on"), WAL_NODE
        proxies = [(str(t), *stack.enter_context(proxy_from(t, cluster.bootstrap, log_dir, args.audit == "on",
                                                            wal_route)))
                   for t in trees]
        for n in range(args.rounds):
            for tree, proc, port in (proxies if n % 2 == 0 else proxies[::-1]):
                topic = create_topic(cluster.bootstrap, PARTITIONS, leader)
                r = run_round(tree, proc.pid, port, topic, args.rate, args.round_seconds, args.linger_ms,
                              args.producers, agent_pid)
                rounds.append(r)
                user, kernel = r.per_request_us()
                mib_user, mib_kernel = r.per_mib_ms()
                print(f"round {n + 1} {tree}: {r.records} records, {r.requests} requests, "
                      f"{r.records / r.requests:.1f} records each, proxy {user:.0f} + {kernel:.0f} µs CPU per request, "
                      f"{r.per_record_us():.0f} µs per record, {mib_user:.2f} + {mib_kernel:.2f} ms per MiB, "
                      f"{r.faults / r.mib():.1f} page faults per MiB{r.agent_per_mib()}", flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    baseline = None
    for tree in (str(t) for t in trees):
        mine = [r for r in rounds if r.tree == tree]
        per_request = statistics.median(sum(r.per_request_us()) for r in mine)
        user = statistics.median(r.per_request_us()[0] for r in mine)
        kernel = statistics.median(r.per_request_us()[1] for r in mine)
        per_record = statistics.median(r.per_record_us() for r in mine)
        mib_user = statistics.median(r.per_mib_ms()[0] for r in mine)
        mib_kernel = statistics.median(r.per_mib_ms()[1] for r in mine)
        per_mib = statistics.median(sum(r.per_mib_ms()) for r in mine)
        faults = statistics.median(r.faults / r.mib() for r in mine)
        figure = per_mib if args.rate <= 0 else per_request
        baseline = baseline or figure
        print(f"{tree}: median {per_request:.0f} µs CPU per request ({user:.0f} user + {kernel:.0f} kernel), "
              f"{per_record:.0f} µs per record, {mib_user:.2f} user + {mib_kernel:.2f} kernel ms per MiB, "
              f"{faults:.1f} page faults per MiB; "
              f"{figure / baseline:.3f}x the first tree ({'per MiB' if args.rate <= 0 else 'per request'})")
    # The host's pace moves every tree's CPU per request between rounds by more than most
    # changes do; within a round the trees ran back to back, so their ratio moves less.
    def user_figure(r: Round) -> float:
        return r.per_mib_ms()[0] if args.rate <= 0 else r.per_request_us()[0]
    first = str(trees[0])
    for tree in (str(t) for t in trees[1:]):
        ratios = [user_figure(mine) / user_figure(base) for mine, base in zip(
            (r for r in rounds if r.tree == tree), (r for r in rounds if r.tree == first), strict=True)]
        print(f"{tree}: user CPU against the first tree round by round: median {statistics.median(ratios):.3f}x "
              f"(min {min(ratios):.3f}x, max {max(ratios):.3f}x, {len(ratios)} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
