"""Agent append throughput (S3 -> Kafka) with 1, 2, 3 agents per zone vs a plain aiokafka producer, same batches, same run.

Run:  .venv/bin/python bench/bench_agent.py [--total-mib 32] [--batch-kib 16] [--partitions 8[,24,512]] [--rounds 2]
                                            [--agents 1,2,3] [--brokers 1] [--broker kafka [--replication-factor 3]]
                                            [--pipeline-depths 1,4] [--ownership leader|partition]
                                            [--offered-mib-s 0 [--per-agent] [--stagger]]
                                            [--cache-mib 256] [--warmup-rounds 0] [--object-mib 8]
                                            [--mock-cluster] [--one-at-a-time] [--s3-keepalive]
                                            [--idempotent] [--requests-in-flight N] [--event-loop uvloop|asyncio]
                                            [--broker-rtt-ms MS] [--append-slots N] [--max-request-mib M]
                                            [--profile-dir DIR] [--trees /tmp/before,.]

Setup: one moto server on loopback and Kafka: with --brokers 1 (the default) one
memory-backed Tansu broker, with --brokers N > 1 (or --mock-cluster) librdkafka's mock cluster of N brokers
(deploy/local/mock_cluster.py, one process; topics made through its control channel with
partition p led by broker p % N + 1, every broker's rack az2, the bench's only zone). The
record batches (`batch-kib` each, 1 KiB records, no producer id) are built once.

--broker kafka: Apache Kafka (deploy/local/kafka_cluster.py), --brokers KRaft nodes (3 by
default), every node in the agents' zone (router.broker_zones; their racks are rack-1..N), topics of --replication-factor replicas
with leaders round-robin; the agents and the plain producer both produce with acks=all. A
phase's topic is made before its clock starts, and waited for until every leader answers
ListOffsets for its partitions (a new topic's leaders refuse produce while they make its logs).
--partitions takes a list (8,24,512): the rounds and the table are repeated per count.
--pipeline-depths 1,4 (the default): every agent phase runs once per notify.pipeline_depth,
side by side in the same round, the order of the phases reversed every other round (1: one
object at a time per agent, 4: objects overlap, leader_notify/sender/pipeline.py); the table ends
with the ratio of each depth to the first (MiB/s and CPU per MiB).

Ownership (--ownership, `notify.agent_ownership`, leader_notify/sender/owners.py): "leader" (the
default) gives every broker's partitions to one agent (broker of rank r to agent r mod n),
so agents beyond the broker count stand by (with Tansu, one agent works); "partition"
hashes each partition to an agent. The topic's leaders are read from Metadata and told to
the layout's AgentMap and to the sender's (note_leaders), so both place partitions alike.

Phase "agent xN" (N from --agents): N agent processes (`azsidecar agent`) serve the zone.
The batches sit in WAL objects of ~8 MiB (--object-mib; wal_s3 format, each zone share laid out by owning
agent as the proxy's writer does, PUT before the clock starts). The proxy's own
ZoneNotifier per agent (leader_notify/sender/notifier.py, with the real NotifySender: a notification
written ahead when the agent is idle, the next objects prefetched) notifies each agent of
its range of every object, agents in parallel, each in object order; an agent does one
ranged GET per object, verifies CRCs and appends every raw batch (one batch of a partition per
ProduceRequest, partitions in parallel, sharing requests). Timed: first notification sent to last response
received. CPU: the agent processes' user+system time (/proc), per MiB.

Phase "producer": a plain AIOKafkaProducer (acks=all) sends the same records grouped in the
same batches (create_batch/send_batch), to a fresh topic. Timed: first send to last ack.
Also printed: CPU time per MiB of the agents (their processes) and of the producer (this
process), steadier than wall clock on a shared host, and the others' CPU per MiB: what the
phase costs the rest of the stack on the same cores (S3: moto serving the GETs, Kafka - the
Tansu or mock cluster process -, and this process, i.e. the proxy's notifiers; for the
producer phase Kafka).

--broker-rtt-ms MS (mock cluster only): every broker answers each request MS later, as a
leader with acks=all does on a network; --append-slots N: the agents' max_in_flight_appends
(with many partitions and a leader's latency, the slots bound an agent's rate);
--max-request-mib M: the agents' agent.max_request_bytes (the plain producer keeps aiokafka's
max_request_size of 1 MiB).

--offered-mib-s R: the notifier announces object k only once objects 0..k-1 make R MiB/s
since the phase began, a steady offered load instead of everything at once. CPU per MiB is
then compared at one load for every agent count, without the host's two cores saturated
(at saturation, more processes than cores add preemptions to the figures). With
--per-agent the offered rate is R per agent (N agents: N x R), as a zone adds agents when
its load grows: CPU per MiB at the same load per agent. With --stagger each agent's share of
an object is paced on its own (share k of object j once the shares before it make R MiB/s),
so the agents' bursts take turns instead of meeting on the host's two cores: as when each
agent has its own vCPU (the Terraform agents module runs each in its own Fargate task).

--cache-mib M: the agents' block cache (wal.cache_bytes, default 256 MiB). Until an agent's
cache is full every GET lands in fresh memory (page faults, printed as faults/MiB); an
agent that serves a third of the load fills it three times later. --warmup-rounds W runs W
rounds first that are not counted, so the figures are the agents' steady state. --profile-dir
DIR: each agent runs under cProfile (CPU-time clock), enabled only during the timed agent
phases (SIGUSR1/SIGUSR2), stats in DIR/agent<i>.prof when it stops; run one agent count
per invocation to profile it alone.

--trees OLD,NEW (checkouts of this project, e.g. `git worktree add /tmp/before <commit>` and
.): a set of agent processes is started from each tree (`python -m azsidecar` in that
directory), and every agent phase runs once per tree in each round, the order reversed every
other round; the table then ends with each tree's MiB/s, CPU and page faults per MiB against
the first's, phase by phase. The notifiers, objects and cluster are this checkout's.

--one-at-a-time (unpaced): each agent gets all its shares of the phase, and answers them,
before the next agent gets any, so every agent has the host to itself while it works, as on
its own vCPU, and works at its own capacity (never idle between shares). Timed: the sum of
the agents' turns, so MiB/s is what one agent after another made, not the zone's parallel
rate. --s3-keepalive: the agents reach moto through deploy/local/s3_delay.py (keep-alive
mode, no delay), which keeps their connections open between requests as S3 does; moto's
server closes every connection, so without it each GET pays a TCP connect and close that a
client of S3 pays once. The front's CPU is counted with moto's (the S3 column).

--idempotent: the batches as one idempotent producer's (a producer id from the cluster's
InitProducerId per agent phase, each partition's sequences from 0; needs the mock cluster:
aiokafka's InitProducerId gets error -1 from Tansu), and the plain producer with
enable_idempotence. --requests-in-flight N and --event-loop set the agents'
agent.requests_in_flight_per_leader and agent.event_loop.

Phases alternate for `rounds` rounds; figures are sums over rounds. Prints MiB/s of
record-batch bytes for each and the ratio agent/producer; each round's line also says how
many partitions each agent owned, e.g. "(3+3+2)", and the agents' CPU s/MiB that round; the
summary also gives the system (kernel) part of the agents' CPU and their voluntary context
switches per MiB ("sleeps": a thread blocked, mostly the loop waiting for an answer, and was
woken). After every phase (untimed) each
partition's log end offset must be its record count (on Tansu also: its last batch's base
offset + 1, what Tansu can report), else the bench stops.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import dataclasses
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import crc32c  # noqa: E402
import trio  # noqa: E402
from aiokafka import AIOKafkaProducer  # noqa: E402
from aiokafka.client import AIOKafkaClient  # noqa: E402
from aiokafka.protocol.transaction import InitProducerIdRequest  # noqa: E402
from confluent_kafka import Consumer, KafkaException, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, OffsetSpec  # noqa: E402
from kafka.admin import KafkaAdminClient, NewTopic  # noqa: E402
from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402

from azsidecar.config import load_config  # noqa: E402
from core.audit import NullAuditSink  # noqa: E402
from deploy.local.kafka_cluster import start_kafka_cluster  # noqa: E402
from deploy.local.mock_cluster import start_mock_cluster  # noqa: E402
from deploy.local.processes import DUMMY_CREDENTIALS, free_port, start_moto, start_tansu  # noqa: E402
from deploy.local.s3_delay import keepalive_front  # noqa: E402
from deploy.local.sidecar_stack import _wait_for_log_line, to_toml  # noqa: E402
from leader_notify.config import EVENT_LOOPS  # noqa: E402
from leader_notify.sender.notifier import ZoneNotifier  # noqa: E402
from leader_notify.sender.owners import OWNERSHIPS, AgentMap  # noqa: E402
from leader_notify.sender.sender import NotifySender  # noqa: E402
from wal_s3.format import WalEntry, encode_object  # noqa: E402

MiB = 1024 * 1024
OBJECT_BYTES = 8 * MiB  # the WAL writer's default flush size
RECORD_BYTES = 1024
KEYS = ("bench-notify-key-0123456789",)
AGENT_READY_S = 30.0
ZONE = "az2"  # the agents' zone; every broker is in it
METADATA_TIMEOUT_S = 30.0  # a new topic's leaders in Metadata
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# --profile-dir: the agent under cProfile with a CPU-time clock (time blocked in epoll is not
# counted), profiling only between SIGUSR1 and SIGUSR2 (the bench sends them around each timed
# agent phase, so start-up and idle time stay out), the stats written when SIGTERM ends it.
# argv: [output, azsidecar arguments...].
PROFILED_AGENT = """
import cProfile, runpy, signal, sys, time
out = sys.argv[1]
sys.argv = ["azsidecar", *sys.argv[2:]]
profiler = cProfile.Profile(time.process_time)
signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())
signal.signal(signal.SIGUSR2, lambda *_: profiler.disable())
try:
    runpy.run_module("azsidecar", run_name="__main__")
except SystemExit:
    pass
finally:
    profiler.disable()
    profiler.dump_stats(out)
"""


@dataclass(frozen=True)
class Flushed:
    key: str
    zones: Any


def build_batches(total_mib: int, batch_kib: int, partitions: int) -> list[tuple[int, list[bytes], bytes]]:
    """[(partition, record values, raw batch)] round-robin over partitions."""
    per_batch = max(1, batch_kib * 1024 // RECORD_BYTES)
    count = max(1, total_mib * MiB // (per_batch * RECORD_BYTES))
    out = []
    now_ms = int(time.time() * 1000)
    for i in range(count):
        values = [os.urandom(RECORD_BYTES // 2).hex().encode() for _ in range(per_batch)]
        b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 24)
        for j, v in enumerate(values):
            b.append(j, now_ms, None, v, [])
        out.append((i % partitions, values, bytes(b.build())))
    return out


def round_robin_leaders(partitions: int, brokers: int) -> dict[int, int]:
    """{partition: broker id}: partition p led by broker p % brokers + 1 (mock cluster ids are 1..N)."""
    return {p: p % brokers + 1 for p in range(partitions)}


def note_leaders(agents: AgentMap, topic: str, leaders: Mapping[int, int]) -> None:
    """Tell `agents` each partition's leader in ZONE, as the proxy's router does (a no-op
    for "partition" ownership or one agent): the layout's map and the sender's both get it,
    so they agree on owners."""
    for partition, leader_id in sorted(leaders.items()):
        agents.note_leader(ZONE, topic, partition, leader_id)


def partitions_per_agent(agents: AgentMap, topic: str, partitions: int) -> list[int]:
    """How many of `topic`'s partitions each agent of ZONE owns (agents with none: 0)."""
    counts = [0] * max(1, agents.count(ZONE))
    for partition in range(partitions):
        counts[agents.owner(ZONE, topic, partition)] += 1
    return counts


def log_ends(batches) -> dict[int, tuple[int, int]]:
    """{partition: (records, base offset of its last batch + 1)} once `batches` are appended
    to an empty topic: the log end offset Kafka reports, and what Tansu can report instead
    (its ListOffsets latest answers the base offset of the last batch + 1,
    docs/operations-local.md)."""
    out: dict[int, tuple[int, int]] = {}
    for partition, values, _raw in batches:
        end = out.get(partition, (0, 0))[0]
        out[partition] = (end + len(values), end + 1)
    return out


def wrong_ends(got: Mapping[int, int], ends: Mapping[int, tuple[int, int]], base_plus_one: bool) -> dict[int, int]:
    """The partitions whose reported end offset in `got` is not the log's end (`ends` as
    log_ends gives), nor, when `base_plus_one` (Tansu), its last batch's base offset + 1."""
    return {p: got.get(p, -1) for p, (end, last_base) in ends.items()
            if got.get(p) != end and not (base_plus_one and got.get(p) == last_base)}


def lay_out(entries: Sequence[WalEntry], agents: AgentMap) -> list[WalEntry]:
    """A zone share's entries grouped by owning agent, as WalWriter does; each partition's
    entries keep their order (a stable sort)."""
    return sorted(entries, key=lambda e: agents.share_of(ZONE, e.topic, e.partition))


_BATCH_PRODUCER = struct.Struct(">qhi")  # producer id, epoch, base sequence at byte 43 of a v2 batch
_BATCH_CRC_AT, _BATCH_CRC_FROM, _BATCH_PRODUCER_AT = 17, 21, 43


def stamp_idempotent(batches, producer_id: int, epoch: int) -> list[tuple[int, list[bytes], bytes, int]]:
    """`batches` (build_batches) as one idempotent producer's: its id and epoch in every
    batch header, each partition's base sequences 0, n, 2n, ... (n records per batch), the
    CRC-32C recomputed; [(partition, values, raw, base sequence)]."""
    out = []
    sequences: dict[int, int] = {}
    for partition, values, raw in batches:
        seq = sequences.get(partition, 0)
        sequences[partition] = seq + len(values)
        stamped = bytearray(raw)
        _BATCH_PRODUCER.pack_into(stamped, _BATCH_PRODUCER_AT, producer_id, epoch, seq)
        struct.pack_into(">I", stamped, _BATCH_CRC_AT, crc32c.crc32c(stamped[_BATCH_CRC_FROM:]))
        out.append((partition, values, bytes(stamped), seq))
    return out


# InitProducerId errors a fresh cluster answers until its transaction coordinator has loaded:
# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR (retriable in Kafka).
COORDINATOR_NOT_READY = frozenset({14, 15, 16})
PRODUCER_ID_TIMEOUT_S = 60.0


def new_producer_id(bootstrap: str) -> tuple[int, int]:
    """(producer id, epoch) from the cluster's InitProducerId, as an idempotent producer gets
    them; asked again (0.2 s apart, at most PRODUCER_ID_TIMEOUT_S) while the coordinator loads."""
    async def ask() -> tuple[int, int]:
        client = AIOKafkaClient(bootstrap_servers=bootstrap)
        await client.bootstrap()
        deadline = time.monotonic() + PRODUCER_ID_TIMEOUT_S
        try:
            while True:
                answer = await client.send(client.get_random_node(), InitProducerIdRequest(None, 60_000))
                if answer.error_code not in COORDINATOR_NOT_READY or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)  # a retry's backoff, as a Kafka producer's
        finally:
            await client.close()
        if answer.error_code != 0:
            raise RuntimeError(f"InitProducerId: error {answer.error_code}")
        return answer.producer_id, answer.producer_epoch
    return asyncio.run(ask())


def put_objects(s3, bucket: str, topic: str, batches, agents: AgentMap,
                object_bytes: int = OBJECT_BYTES, producer: tuple[int, int] = (-1, -1)) -> list[Flushed]:
    """Objects of ~object_bytes; each object's az2 share laid out by owning agent, as WalWriter does.
    `batches` as build_batches gives them, or stamp_idempotent with `producer` its (id, epoch)."""
    objs, current, size, seq = [], [], 0, 0
    for partition, values, raw, *base_sequence in [*batches, (None, None, None)]:
        if raw is None or (size + len(raw) > object_bytes and current):
            enc = encode_object(writer_id="bench", epoch=1, sequence=seq, created_ms=int(time.time() * 1000),
                                entries_by_zone={ZONE: lay_out(current, agents)})
            key = f"wal/{uuid.uuid4().hex[:8]}/bench-{seq}"
            s3.put_object(Bucket=bucket, Key=key, Body=enc.data)
            objs.append(Flushed(key, enc.zones))
            current, size, seq = [], 0, seq + 1
        if raw is not None:
            current.append(WalEntry(topic, partition, producer[0], producer[1],
                                    base_sequence[0] if base_sequence else -1, len(values), raw))
            size += len(raw)
    return objs


@contextlib.contextmanager
def agents_s3(moto, log_dir: Path, keepalive: bool) -> Iterator[tuple[str, list[int]]]:
    """(the S3 URL the agents use, the pids serving it): moto's, or with `keepalive` the
    keep-alive front's (no delay) in front of moto's."""
    if not keepalive:
        yield moto.endpoint_url, [moto.proc.pid]
        return
    with keepalive_front(moto, log_dir) as served:
        yield served


class AgentProcesses:
    """`count` agent processes of zone az2 on loopback ports."""

    def __init__(self, count: int, base: dict, log_dir: Path, profile_dir: Path | None = None,
                 agent: Mapping[str, Any] | None = None, tree: Path | None = None, tag: str = "") -> None:
        """agent: more of the agents' `agent` settings; tree: the checkout the agents run from
        (None: this one, as imported); tag: in the names of their config and log files."""
        self.ports = [free_port() for _ in range(count)]
        self.procs: list[subprocess.Popen] = []
        self.base, self.log_dir, self.profile_dir = base, log_dir, profile_dir
        self.agent = dict(agent or {})
        self.tree, self.tag = tree, tag

    def __enter__(self) -> AgentProcesses:
        env = {**os.environ, **DUMMY_CREDENTIALS, "AZSIDECAR_NOTIFY_HMAC_KEYS": ",".join(KEYS),
               "AWS_DEFAULT_REGION": "us-east-1"}
        try:
            for i, port in enumerate(self.ports):
                config = self.log_dir / f"agent{self.tag}{i}.toml"
                config.write_text(to_toml({"zone": "az2", **self.base,
                                           "agent": {"listen_host": "127.0.0.1", "listen_port": port,
                                                     "checkpoint_interval_ms": 600_000, **self.agent}}))
                log = self.log_dir / f"agent{self.tag}{i}.log"
                with open(log, "ab") as out:
                    args = ["agent", "--config", str(config)]
                    command = ([sys.executable, "-m", "azsidecar", *args] if self.profile_dir is None
                               else [sys.executable, "-c", PROFILED_AGENT, str(self.profile_dir / f"agent{self.tag}{i}.prof"),
                                     *args])
                    proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                            cwd=None if self.tree is None else self.tree.resolve())
                self.procs.append(proc)
                _wait_for_log_line(proc, log, "listening=", AGENT_READY_S, f"agent {i}", 0)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def addresses(self, n: int) -> list[str]:
        return [f"127.0.0.1:{port}" for port in self.ports[:n]]

    def signal(self, n: int, signum: int) -> None:
        """Send `signum` to the first `n` agents if they run under the profiler."""
        if self.profile_dir is not None:
            for proc in self.procs[:n]:
                proc.send_signal(signum)

    def cpu_s(self, n: int) -> float:
        """user + system CPU seconds of the first `n` agent processes so far."""
        return sum(process_cpu_s(proc.pid) for proc in self.procs[:n])

    def system_cpu_s(self, n: int) -> float:
        """The system (kernel) part of cpu_s."""
        return sum(process_system_cpu_s(proc.pid) for proc in self.procs[:n])

    def sleeps(self, n: int) -> int:
        """Voluntary context switches of the first `n` agent processes so far."""
        return sum(process_sleeps(proc.pid) for proc in self.procs[:n])

    def peak_rss_mib(self) -> list[float]:
        """Each agent process's peak resident memory so far (VmHWM), MiB."""
        return [process_peak_rss_kib(proc.pid) / 1024 for proc in self.procs]

    def minor_faults(self, n: int) -> int:
        """Minor page faults of the first `n` agent processes so far."""
        return sum(process_minor_faults(proc.pid) for proc in self.procs[:n])


def process_peak_rss_kib(pid: int) -> int:
    """The peak resident set of process `pid` so far (VmHWM), KiB; 0 if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def process_sleeps(pid: int) -> int:
    """Voluntary context switches of process `pid`'s threads so far: each time one blocked
    (the event loop waiting in epoll for an answer, mostly) and was woken."""
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue  # a thread that just ended
        for line in text.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                total += int(line.split()[1])
    return total


def process_cpu_s(pid: int) -> float:
    """user + system CPU seconds of process `pid` so far."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime (fields 14 and 15 of stat)


def process_system_cpu_s(pid: int) -> float:
    """system CPU seconds of process `pid` so far (syscalls, the TCP work they do, page faults)."""
    return int(_stat_fields(pid)[12]) / CLOCK_TICKS  # stime, field 15 of stat


def process_minor_faults(pid: int) -> int:
    """Minor page faults of process `pid` so far (a first touch of fresh memory)."""
    return int(_stat_fields(pid)[7])  # minflt, field 10 of stat


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat after the command name (fields 3 on)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def announcements(objs, slices: Callable[[Any], Sequence[tuple[int, int, int]]], offered_mib_s: float,
                  stagger: bool) -> list[tuple[float, Any, int, int, int]]:
    """(due s after the phase starts, object, agent, first entry, end entry) of every share in
    announcement order. Unpaced (offered_mib_s 0): all due at 0. Paced: an object is due once
    the zone bytes of the objects before it make `offered_mib_s`; with `stagger` each share
    once the bytes of the shares before it do (the agents' bursts then take turns)."""
    out: list[tuple[float, Any, int, int, int]] = []
    offered = 0
    for obj in objs:
        share = obj.zones[ZONE]
        due = offered / (offered_mib_s * MiB) if offered_mib_s > 0 else 0.0
        if not stagger:
            offered += share.length
        for agent, first, end in slices(share.entries):
            if stagger and offered_mib_s > 0:
                due = offered / (offered_mib_s * MiB)
                offered += sum(entry.length for entry in share.entries[first:end])
            out.append((due, obj, agent, first, end))
    return out


def in_turn(schedule: Sequence[tuple[float, Any, int, int, int]]) -> list[list[tuple[float, Any, int, int, int]]]:
    """`schedule` (announcements' output) as one list per agent, agents in the order they
    first appear, each list in schedule order: --one-at-a-time runs them one after another."""
    by_agent: dict[int, list[tuple[float, Any, int, int, int]]] = {}
    for item in schedule:
        by_agent.setdefault(item[2], []).append(item)
    return list(by_agent.values())


async def run_agent_phase(config, objs, bucket: str, topic: str, leaders: Mapping[int, int],
                          offered_mib_s: float = 0.0, stagger: bool = False, one_at_a_time: bool = False) -> float:
    """Every object to every owning agent of az2, as the proxy's per-agent ZoneNotifiers do;
    with `offered_mib_s`, object k is announced once the objects before it make that rate,
    with `stagger` too each agent's share once the shares before it make it (the agents'
    bursts then take turns on the host's cores). With `one_at_a_time` (unpaced) each agent gets
    all its shares, and answers them all, before the next agent gets any."""
    sender = NotifySender(config.notify, "az1", "bench", 1, NullAuditSink(), bucket=bucket)
    note_leaders(sender.agents, topic, leaders)  # before any owner is asked: else it hashes
    failures: list[str] = []

    def check(key: str, got: Any) -> None:
        if isinstance(got, Exception):
            failures.append(f"{key}: {got}")
        elif any(r.error_code for r in got):
            failures.append(f"{key}: {sum(1 for r in got if r.error_code)} entries failed, codes "
                            f"{sorted({r.error_code for r in got if r.error_code})}")

    try:
        async with trio.open_nursery() as nursery:
            notifiers: dict[int, ZoneNotifier] = {}
            schedule = announcements(objs, lambda entries: sender.agents.slices(ZONE, entries), offered_mib_s,
                                     stagger)
            started, paced_from = time.perf_counter(), trio.current_time()
            for turn in (in_turn(schedule) if one_at_a_time else [schedule]):
                for due, obj, agent, first, end in turn:
                    if due > 0:  # a steady offered load: CPU per MiB without saturating the host
                        await trio.sleep_until(paced_from + due)
                    notifier = notifiers.get(agent)
                    if notifier is None:
                        notifier = notifiers[agent] = ZoneNotifier(ZONE, sender, nursery, agent=agent)
                    notifier.announce(obj, first, end)
                    notifier.on_result(obj.key, lambda got, key=obj.key: check(key, got))
                    for _ in range(first + 1, end):  # every entry asks once (the proxy's waiters)
                        notifier.on_result(obj.key, lambda got: None)
                for notifier in notifiers.values():
                    await notifier.wait_idle()
            elapsed = time.perf_counter() - started
            nursery.cancel_scope.cancel()
        if failures:
            raise RuntimeError(f"{len(failures)} notifications failed: {failures[0]}")
        return elapsed
    finally:
        await sender.aclose()


async def run_producer_phase(bootstrap: str, topic: str, batches, idempotent: bool = False) -> float:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", max_batch_size=1 << 24,
                                enable_idempotence=idempotent)
    await producer.start()
    try:
        await producer.client._wait_on_metadata(topic)  # metadata outside the timed part, as for the agent
        now_ms = int(time.time() * 1000)
        started = time.perf_counter()
        futures = []
        for partition, values, _raw in batches:
            b = producer.create_batch()
            for v in values:
                b.append(key=None, value=v, timestamp=now_ms)
            futures.append(await producer.send_batch(b, topic, partition=partition))
        await asyncio.gather(*futures)
        return time.perf_counter() - started
    finally:
        await producer.stop()


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


def topic_leaders(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """{partition: leader node id} of `topic` from Metadata. Raises RuntimeError if some
    partition has no leader within METADATA_TIMEOUT_S."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + METADATA_TIMEOUT_S
    found: dict[int, int] = {}
    while time.monotonic() < deadline:  # each try is one Metadata round trip
        meta = admin.list_topics(topic, timeout=max(0.1, deadline - time.monotonic()))
        t = meta.topics.get(topic)
        if t is not None and t.error is None:
            found = {p: m.leader for p, m in t.partitions.items() if m.leader >= 0}
            if len(found) == partitions:
                return found
    raise RuntimeError(f"{topic}: leaders of {sorted(found)} of {partitions} partitions after {METADATA_TIMEOUT_S}s")


def wait_until_led(bootstrap: str, topic: str, partitions: int) -> None:
    """Return once every partition's leader answers ListOffsets for it. Raises RuntimeError
    if some do not within METADATA_TIMEOUT_S.

    Why: a new topic's leaders are in Metadata before every leader has made the partition's
    log (for 512 partitions, seconds on this host), and until then it refuses produce with
    NOT_LEADER_OR_FOLLOWER: a phase that began meanwhile measured part of the topic's
    creation (2026-12-02, 512 partitions: the agent logged 362 such refusals in one run, the
    plain producer retried them too). ListOffsets meets the same check in the leader and
    writes nothing."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    pending = [TopicPartition(topic, p) for p in range(partitions)]
    deadline = time.monotonic() + METADATA_TIMEOUT_S
    while pending and time.monotonic() < deadline:  # each try is one ListOffsets round trip per leader
        futures = admin.list_offsets({tp: OffsetSpec.latest() for tp in pending},
                                     request_timeout=max(0.1, deadline - time.monotonic()))
        refused = []
        for tp, future in futures.items():
            try:
                future.result()
            except KafkaException:
                refused.append(tp)
        pending = refused
    if pending:
        raise RuntimeError(f"{topic}: {len(pending)} of {partitions} partitions not led after {METADATA_TIMEOUT_S}s")


def check_appended(kafka: Kafka, topic: str, ends: Mapping[int, tuple[int, int]]) -> None:
    """Raises RuntimeError unless every partition of `topic` ends where `ends` (log_ends) says."""
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"bench-check-{topic}"})
    try:
        got = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in ends}
    finally:
        consumer.close()
    wrong = wrong_ends(got, ends, kafka.base_plus_one)
    if wrong:
        raise RuntimeError(f"{topic}: partitions {wrong} end elsewhere than {dict(ends)} "
                           "(records, last batch's base offset + 1): not every batch was appended once")


@dataclass(frozen=True)
class Kafka:
    """The cluster under test: its bootstraps, its process (for CPU) and how to make a topic."""

    bootstraps: tuple[str, ...]
    pids: tuple[int, ...]  # the broker processes (their CPU is the Kafka column)
    create_topic: Callable[[str, int], None]
    base_plus_one: bool  # Tansu: its log end offset can be the last batch's base offset + 1
    # router.broker_zones for the agents: Apache Kafka's nodes have distinct racks, and the
    # bench puts them all in the agents' zone this way.
    broker_zones: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return ",".join(self.bootstraps)


@contextlib.contextmanager
def start_kafka(brokers: int, log_dir: Path, mock: bool = False, rtt_ms: int = 0, apache: bool = False,
                replication_factor: int = 3) -> Iterator[Kafka]:
    """One Tansu broker (brokers == 1, not `mock`) or librdkafka's mock cluster of `brokers`
    brokers in zone az2, partitions' leaders round-robin over them (it has no CreateTopics);
    the mock's brokers delay every answer by `rtt_ms` (a leader's acks=all latency). With
    `apache`: Apache Kafka, `brokers` KRaft nodes all racked in az2 (deploy/local/kafka_cluster.py),
    topics of `replication_factor` replicas, leaders round-robin (partition p on node p % brokers + 1)."""
    if apache:
        racks = tuple(f"rack-{n}" for n in range(1, brokers + 1))
        with start_kafka_cluster(racks, log_dir=log_dir / "kafka") as cluster:
            def create_apache(name: str, partitions: int) -> None:
                rf = min(replication_factor, brokers)
                cluster.create_topic(name, partitions, replication_factor=rf, assignments={
                    p: [(p + i) % brokers + 1 for i in range(rf)] for p in range(partitions)})
                wait_until_led(cluster.bootstrap, name, partitions)

            pids = tuple(node.proc.pid for node in cluster.nodes.values() if node.proc is not None)
            yield Kafka(tuple(cluster.bootstraps), pids, create_apache, False,
                        {str(n): ZONE for n in range(1, brokers + 1)})
        return
    if brokers == 1 and not mock:
        with start_tansu(log_dir=log_dir) as tansu:
            assert tansu.proc is not None
            yield Kafka((tansu.bootstrap,), (tansu.proc.pid,),
                        lambda name, partitions: create_topic(tansu.bootstrap, name, partitions), True)
        return
    with start_mock_cluster(brokers, racks={b: ZONE for b in range(1, brokers + 1)}, log_dir=log_dir) as cluster:
        def create(name: str, partitions: int) -> None:
            cluster.create_topic(name, partitions)
            for partition, broker_id in round_robin_leaders(partitions, brokers).items():
                cluster.set_leader(name, partition, broker_id)

        for broker_id in range(1, brokers + 1) if rtt_ms else ():
            cluster.set_rtt(broker_id, rtt_ms)
        yield Kafka(cluster.bootstraps, (cluster.proc.pid,), create, False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--total-mib", type=int, default=32)
    ap.add_argument("--batch-kib", type=int, default=16)
    ap.add_argument("--partitions", default="8",
                    help="partition counts, comma-separated (e.g. 8,24,512): a table for each")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--agents", default="1,2,3", help="agents per zone to compare, comma-separated")
    ap.add_argument("--brokers", type=int, default=None,
                    help="1: one Tansu broker; N > 1: librdkafka's mock cluster of N brokers, leaders round-robin "
                         "(default 1; with --broker kafka: 3 Apache Kafka nodes)")
    ap.add_argument("--broker", choices=("tansu-or-mock", "kafka"), default="tansu-or-mock",
                    help="kafka: Apache Kafka (KRaft), --brokers nodes, all in the agents' zone by router.broker_zones")
    ap.add_argument("--replication-factor", type=int, default=3,
                    help="with --broker kafka: replicas per partition (acks=all for agents and producer alike)")
    ap.add_argument("--pipeline-depths", default="1,4",
                    help="notify.pipeline_depth values compared side by side in each round (1: one object at a "
                         "time per agent, no overlap; 4: the default, objects overlap)")
    ap.add_argument("--ownership", choices=OWNERSHIPS, default="leader",
                    help="notify.agent_ownership: a broker's partitions to one agent, or hashed per partition")
    ap.add_argument("--offered-mib-s", type=float, default=0.0,
                    help="announce objects at this rate (0: all at once); compares CPU per MiB at one load")
    ap.add_argument("--per-agent", action="store_true",
                    help="--offered-mib-s is per agent: N agents are offered N times it")
    ap.add_argument("--stagger", action="store_true",
                    help="with --offered-mib-s: pace each agent's share of an object on its own, so the agents' "
                         "bursts take turns on the host's cores (as agents on their own vCPUs) instead of meeting")
    ap.add_argument("--one-at-a-time", action="store_true",
                    help="unpaced, the agents one after another: each has the host to itself, as on its own vCPU")
    ap.add_argument("--mock-cluster", action="store_true",
                    help="librdkafka's mock cluster even for --brokers 1 (default there: one Tansu broker)")
    ap.add_argument("--object-mib", type=float, default=OBJECT_BYTES / MiB,
                    help="WAL object size (default 8, the writer's flush size); each agent's share is its part")
    ap.add_argument("--cache-mib", type=int, default=None,
                    help="the agents' block cache, wal.cache_bytes (default: the agent's own, 256 MiB)")
    ap.add_argument("--warmup-rounds", type=int, default=0,
                    help="rounds run first and not counted (the agents' caches filled: their steady state)")
    ap.add_argument("--s3-keepalive", action="store_true",
                    help="the agents' S3 through deploy/local/s3_delay.py at 0 ms, which keeps their "
                         "connections alive as S3 does (moto closes each one)")
    ap.add_argument("--idempotent", action="store_true",
                    help="the batches as one idempotent producer's (a producer id per agent phase, sequences); "
                         "the plain producer with enable_idempotence")
    ap.add_argument("--event-loop", choices=EVENT_LOOPS, default=None,
                    help="the agents' agent.event_loop (default: the agent's default)")
    ap.add_argument("--requests-in-flight", type=int, default=0,
                    help="the agents' agent.requests_in_flight_per_leader (0: its default)")
    ap.add_argument("--broker-rtt-ms", type=int, default=0,
                    help="the mock cluster's brokers answer every request this much later (a leader's latency)")
    ap.add_argument("--append-slots", type=int, default=0,
                    help="the agents' agent.max_in_flight_appends (0: its default)")
    ap.add_argument("--max-request-mib", type=float, default=0,
                    help="the agents' agent.max_request_bytes in MiB (0: its default)")
    ap.add_argument("--trees", default=None,
                    help="comma-separated checkouts (e.g. a git worktree of an older commit, and .): every agent "
                         "phase runs once with agents started from each, side by side in each round")
    ap.add_argument("--profile-dir", type=Path, default=None,
                    help="run the agents under cProfile (CPU time), writing agent<i>.prof here when they stop")
    args = ap.parse_args()
    counts = [int(n) for n in args.agents.split(",")]
    trees: list[Path | None] = [Path(tree) for tree in args.trees.split(",")] if args.trees else [None]
    if any(tree is not None and not (tree / "azsidecar").is_dir() for tree in trees):
        ap.error("--trees: each must be a checkout of this project (git worktree add /tmp/before <commit>)")
    if not counts or min(counts) < 1:
        ap.error("--agents: positive counts")
    if args.brokers is None:
        args.brokers = 3 if args.broker == "kafka" else 1
    if args.brokers < 1:
        ap.error("--brokers: at least 1")
    apache = args.broker == "kafka"
    if apache and (args.mock_cluster or args.broker_rtt_ms):
        ap.error("--broker kafka: no --mock-cluster or --broker-rtt-ms")
    try:
        partition_counts = [int(n) for n in args.partitions.split(",")]
        depths = [int(n) for n in args.pipeline_depths.split(",")]
    except ValueError:
        ap.error("--partitions and --pipeline-depths: comma-separated integers")
    if not partition_counts or min(partition_counts) < 1 or not depths or not all(1 <= d <= 16 for d in depths):
        ap.error("--partitions: positive counts; --pipeline-depths: 1..16")
    if args.idempotent and args.brokers == 1 and not args.mock_cluster and args.broker != "kafka":
        ap.error("--idempotent needs the mock cluster (--mock-cluster or --brokers N > 1): "
                 "aiokafka's InitProducerId gets error -1 from Tansu")
    if args.broker_rtt_ms and (args.brokers == 1 and not args.mock_cluster or args.broker_rtt_ms < 0):
        ap.error("--broker-rtt-ms: a positive delay, on the mock cluster (--mock-cluster or --brokers N > 1)")
    if args.append_slots < 0:
        ap.error("--append-slots: at least 1 (0: the agents' default)")
    if args.requests_in_flight and not 1 <= args.requests_in_flight <= 5:
        ap.error("--requests-in-flight: 1..5")
    if args.max_request_mib and not 1 / 16 <= args.max_request_mib <= 64:
        ap.error("--max-request-mib: 1/16..64 (agent.max_request_bytes: 64 KiB..64 MiB)")
    if args.stagger and args.offered_mib_s <= 0:
        ap.error("--stagger paces shares: give --offered-mib-s")
    if args.one_at_a_time and args.offered_mib_s > 0:
        ap.error("--one-at-a-time runs each agent at its own pace: no --offered-mib-s")
    if args.object_mib <= 0 or (args.cache_mib is not None and args.cache_mib < 0):
        ap.error("--object-mib: positive; --cache-mib: at least 0")
    if args.warmup_rounds < 0 or args.rounds < 1:
        ap.error("--rounds: at least 1; --warmup-rounds: at least 0")
    os.environ.update(DUMMY_CREDENTIALS)  # boto3 in this process talks to moto
    log_dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-agent-{uuid.uuid4().hex[:6]}"
    log_dir.mkdir(parents=True)
    # The brokers' data (GBs after a run) goes at exit, once they have stopped; the agents' logs stay.
    atexit.register(shutil.rmtree, log_dir / "kafka", True)
    kafka_name = (f"{args.brokers} Apache Kafka node(s), RF {min(args.replication_factor, args.brokers)}" if apache
                  else "one Tansu broker" if args.brokers == 1 and not args.mock_cluster
                  else f"{args.brokers} broker(s) (librdkafka mock cluster)")
    with start_moto() as moto, start_kafka(args.brokers, log_dir, args.mock_cluster, args.broker_rtt_ms, apache,
                                           args.replication_factor) as kafka, \
            agents_s3(moto, log_dir, args.s3_keepalive) as (agents_s3_url, s3_pids):
        bucket = "bench-agent"
        moto.create_bucket(bucket)
        wal = {"bucket": bucket, "region": "us-east-1", "prefix": "wal/", "endpoint_url": agents_s3_url}
        if args.cache_mib is not None:
            wal["cache_bytes"] = args.cache_mib * MiB
        base: dict[str, Any] = {"wal": wal, "upstream": {"bootstrap_servers": list(kafka.bootstraps)}}
        if kafka.broker_zones:
            base["router"] = {"broker_zones": dict(kafka.broker_zones)}
        agent_settings: dict[str, Any] = {"event_loop": args.event_loop} if args.event_loop else {}
        if args.requests_in_flight:
            agent_settings["requests_in_flight_per_leader"] = args.requests_in_flight
        if args.append_slots:
            agent_settings["max_in_flight_appends"] = args.append_slots
        if args.max_request_mib:
            agent_settings["max_request_bytes"] = int(args.max_request_mib * MiB)
        with contextlib.ExitStack() as stack:
            fleets = [stack.enter_context(AgentProcesses(max(counts), base, log_dir, args.profile_dir, agent_settings,
                                                         tree, f"-{k}-" if tree is not None else ""))
                      for k, tree in enumerate(trees)]
            for partitions in partition_counts:
                run_partitions(args, partitions, counts, depths, kafka, kafka_name, moto, bucket, s3_pids, fleets,
                               [str(tree) for tree in trees if tree is not None])
    return 0


def run_partitions(args, partitions: int, counts: list[int], depths: list[int], kafka: Kafka, kafka_name: str,
                   moto, bucket: str, s3_pids: list[int], fleets: list[AgentProcesses], trees: list[str]) -> None:
    """Rounds at one partition count: each round runs every (agents, pipeline depth) phase -
    with `--trees`, of every tree's agents - and the plain producer's, one after another;
    then the table of sums over rounds."""
    batches = build_batches(args.total_mib, args.batch_kib, partitions)
    batch_bytes = sum(len(raw) for _, _, raw in batches)
    mib = batch_bytes / MiB
    ends = log_ends(batches)
    s3 = moto.client()
    print(f"\n{len(batches)} batches of ~{args.batch_kib} KiB over {partitions} partitions, "
          f"{mib:.1f} MiB per phase, {args.rounds} rounds, agents per zone {counts}, pipeline depths {depths}, "
          f"ownership {args.ownership}, {kafka_name}"
          + (f", objects offered at {args.offered_mib_s:g} MiB/s{' per agent' if args.per_agent else ''}"
             f"{', shares staggered' if args.stagger else ''}" if args.offered_mib_s > 0 else "")
          + (", agents one at a time" if args.one_at_a_time else "")
          + (", idempotent batches" if args.idempotent else "")
          + (f", {args.requests_in_flight} requests in flight per leader" if args.requests_in_flight else "")
          + (f", brokers answer after {args.broker_rtt_ms} ms" if args.broker_rtt_ms else "")
          + (f", {args.append_slots} append slots per agent" if args.append_slots else "")
          + (f", agents on {args.event_loop}" if args.event_loop else "")
          + (f", agents' cache {args.cache_mib} MiB" if args.cache_mib is not None else "")
          + (f", {args.warmup_rounds} warm-up rounds not counted" if args.warmup_rounds else "")
          + (f", agents from {' and '.join(trees)}" if trees else ""))
    phases = [(t, n, d) for n in counts for d in depths for t in range(len(fleets))]
    wall = {ph: 0.0 for ph in phases}
    cpu = {ph: 0.0 for ph in phases}
    faults = {ph: 0 for ph in phases}
    sleeps = {ph: 0 for ph in phases}
    system = {ph: 0.0 for ph in phases}
    t_producer = cpu_producer = 0.0
    # The rest of each phase's CPU on the same cores: moto (S3) and Kafka; for the agents also
    # this process (the proxy's notifiers and sender). Printed so the ratio can be read
    # against what the agents' phase makes the shared cores do besides appending.
    others = {ph: [0.0, 0.0, 0.0] for ph in phases}  # S3 (moto, and the keep-alive front), Kafka, this process
    others_producer = 0.0
    for r in range(-args.warmup_rounds, args.rounds):
        counted = r >= 0
        line = [f"round {r}:" if counted else f"warm-up {r + args.warmup_rounds}:"]
        # Alternate the order of the phases from round to round, so neither side always runs
        # first (a warmer cache, a quieter host).
        for t, n, depth in (phases if r % 2 == 0 else phases[::-1]):
            agents = fleets[t]
            # gray_max_s: a 512-partition object took the shared host's cluster over 18 s to append
            # (the proxy's gray deadline then abandons it); this bench measures throughput.
            config = load_config(None, {
                "wal.bucket": bucket, "wal.region": "us-east-1", "wal.prefix": "wal/", "wal.endpoint_url": moto.endpoint_url,
                "notify.hmac_keys": list(KEYS), "notify.timeout_s": 120.0, "notify.gray_max_s": 60.0,
                "notify.pipeline_depth": depth,
                "notify.agents": {ZONE: agents.addresses(n)}, "notify.agent_ownership": args.ownership})
            topic = f"bench-agent{n}-{r}-{uuid.uuid4().hex[:6]}"
            kafka.create_topic(topic, partitions)
            leaders = topic_leaders(kafka.bootstrap, topic, partitions)
            layout = AgentMap(config.notify.agents, config.notify.agent_ownership)
            note_leaders(layout, topic, leaders)
            if args.idempotent:
                producer = new_producer_id(kafka.bootstrap)
                objs = put_objects(s3, bucket, topic, stamp_idempotent(batches, *producer), layout,
                                   int(args.object_mib * MiB), producer)
            else:
                objs = put_objects(s3, bucket, topic, batches, layout, int(args.object_mib * MiB))
            c0, f0, s0 = agents.cpu_s(n), agents.minor_faults(n), agents.system_cpu_s(n)
            w0 = agents.sleeps(n)
            o0 = (sum(map(process_cpu_s, s3_pids)), sum(map(process_cpu_s, kafka.pids)), time.process_time())
            agents.signal(n, signal.SIGUSR1)  # profiled agents: profile this phase
            t_phase = trio.run(run_agent_phase, config, objs, bucket, topic, leaders,
                         args.offered_mib_s * (n if args.per_agent else 1), args.stagger,
                         args.one_at_a_time)
            agents.signal(n, signal.SIGUSR2)
            spent = agents.cpu_s(n) - c0
            o1 = (sum(map(process_cpu_s, s3_pids)), sum(map(process_cpu_s, kafka.pids)), time.process_time())
            ph = (t, n, depth)
            if counted:
                cpu[ph] += spent
                faults[ph] += agents.minor_faults(n) - f0
                sleeps[ph] += agents.sleeps(n) - w0
                system[ph] += agents.system_cpu_s(n) - s0
                others[ph] = [acc + after - before for acc, after, before in zip(others[ph], o1, o0)]
                wall[ph] += t_phase
            check_appended(kafka, topic, ends)
            shares = "+".join(map(str, partitions_per_agent(layout, topic, partitions)))
            line.append(f"agents x{n} depth {depth}{tree_label(trees, t)} {mib / t_phase:7.1f} MiB/s ({shares}) "
                        f"{spent / mib:.4f} s/MiB")
        topic_p = f"bench-prod-{r}-{uuid.uuid4().hex[:6]}"
        kafka.create_topic(topic_p, partitions)
        c1 = time.process_time()
        t1 = sum(map(process_cpu_s, kafka.pids))
        tp = asyncio.run(run_producer_phase(kafka.bootstrap, topic_p, batches, args.idempotent))
        if counted:
            cpu_producer += time.process_time() - c1
            others_producer += sum(map(process_cpu_s, kafka.pids)) - t1
            t_producer += tp
        check_appended(kafka, topic_p, ends)
        line.append(f"producer {mib / tp:7.1f} MiB/s")
        print("   ".join(line))
    total = mib * args.rounds
    producer_rate = total / t_producer
    print(f"{partitions} partitions{'':9s} {'MiB/s':>8s} {'x producer':>11s} {'CPU s/MiB':>10s} {'of it sys':>10s} "
          f"{'faults/MiB':>11s} {'sleeps/MiB':>11s}   "
          f"others' CPU s/MiB: {'S3':>7s} {'Kafka':>7s} {'proxy':>7s}")
    for t, n, depth in phases:
        ph = (t, n, depth)
        rate = total / wall[ph]
        print(f"agents x{n:<3d} depth {depth:<2d}{tree_label(trees, t):7s}{rate:8.1f} {rate / producer_rate:11.2f} {cpu[ph] / total:10.5f} "
              f"{system[ph] / total:10.5f} {faults[ph] / total:11.0f} {sleeps[ph] / total:11.1f}   {'':19s}"
              + " ".join(f"{x / total:7.4f}" for x in others[ph]))
    print(f"plain aiokafka producer    {producer_rate:8.1f} {1.0:11.2f} {cpu_producer / total:10.4f} {'-':>10s} {'-':>11s} "
          f"{'-':>11s}   "
          f"{'':19s}{'-':>7s} {others_producer / total:7.4f} {'-':>7s}")
    for t in range(len(fleets)):
        if len(depths) > 1:
            base_depth = depths[0]
            for n in counts:
                print(f"agents x{n}{tree_label(trees, t)}: " + ", ".join(
                    f"depth {d} / depth {base_depth} = {wall[(t, n, base_depth)] / wall[(t, n, d)]:.2f}x MiB/s, "
                    f"{cpu[(t, n, d)] / cpu[(t, n, base_depth)]:.2f}x CPU per MiB" for d in depths[1:]))
        if len(counts) > 1:
            for d in depths:
                print(f"agents depth {d}{tree_label(trees, t)}: " + ", ".join(
                    f"x{n} / x{counts[0]} = {cpu[(t, n, d)] / cpu[(t, counts[0], d)]:.3f}x CPU per MiB"
                    for n in counts[1:]))
    for t, fleet in enumerate(fleets):
        print(f"agents' peak RSS so far{tree_label(trees, t)}: "
              + ", ".join(f"{mib:.0f}" for mib in fleet.peak_rss_mib()) + " MiB")
    for t in range(1, len(fleets)):
        for n in counts:
            for d in depths:
                print(f"agents x{n} depth {d}: {trees[t]} / {trees[0]} = "
                      f"{wall[(0, n, d)] / wall[(t, n, d)]:.3f}x MiB/s, {cpu[(t, n, d)] / cpu[(0, n, d)]:.3f}x CPU per MiB, "
                      f"faults per MiB {faults[(0, n, d)] / total:.0f} -> {faults[(t, n, d)] / total:.0f}")


def tree_label(trees: list[str], t: int) -> str:
    """` [tree]` after a phase's name with --trees, else nothing."""
    return f" [{trees[t]}]" if trees else ""


if __name__ == "__main__":
    sys.exit(main())
