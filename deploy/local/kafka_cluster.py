"""A three-node Apache Kafka cluster (KRaft, one node per zone, `broker.rack` = the zone).

Strategy. Each node is one JVM running `kafka.Kafka` as broker and controller, from the
jars `kafka_jars` caches. A start writes each node's `server.properties`, formats every
log directory with one cluster id (`kafka.tools.StorageTool`, the three in parallel, once
per cluster shape: later starts copy the formatted directories),
starts the three JVMs together (a broker waits for the quorum) and is ready when each
node, asked alone, lists every broker in a Metadata answer. Stop sends SIGTERM to all
nodes together and kills what has not stopped in time (a node left without a quorum can
hang in controlled shutdown); `kill_node` is kill -9 for the failure tests, and
`start_node` restarts a node on its own log directory.

On loopback every node gets two free ports (client, controller); in the zones'
network namespaces each node listens on its zone's bridge address, so replication
and the quorum cross the metered bridge as they cross zones on AWS.

The defaults are what the tests need from a production-like cluster: replication
factor 3, `min.insync.replicas=2`, the rack-aware replica selector (follower fetching),
and no automatic leader rebalancing (the tests own the leaders). Heaps are small and
the JIT stops at C1 so three nodes fit beside the rest of a test on two cores
(measured: docs/operations-local.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy.local import kafka_admin
from deploy.local.kafka_jars import COMPLETE_MARKER, KAFKA_VERSION, LOG4J2_CONFIG, classpath, lib_dir
from deploy.local.processes import free_port

log = logging.getLogger(__name__)

DEFAULT_RACKS = ("use1-az1", "use1-az2", "use1-az3")
READY_TIMEOUT_S = 90.0  # three JVMs starting together on two loaded cores
FORMAT_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0  # controlled shutdown; the last node, without a quorum, can hang in it
ARCHIVE_STOP_TIMEOUT_S = 60.0  # a JVM writing its class-data archive at exit
LAST_NODE_GRACE_S = 2.0  # the last node of a stopping cluster: no quorum to finish with
STOP_POLL_S = 0.2
ADMIN_TIMEOUT_S = 60.0
HEAP_MB = 256  # measured RSS ~200-300 MB per node at this heap (docs/operations-local.md)
NETNS_PORT = 9093  # netns mode: the node's client port on its zone address (9092 is the sidecar's)
NETNS_CONTROLLER_PORT = 9094
REPLICATION_PORT = 9095  # the inter-broker listener when it has an address of its own

# Broker settings of every node; `overrides` in start_kafka_cluster adds or replaces keys.
BASE_SETTINGS: dict[str, str] = {
    "process.roles": "broker,controller",
    "controller.listener.names": "CONTROLLER",
    "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "auto.leader.rebalance.enable": "false",  # else the controller moves leaders back every ~5 min
    "group.initial.rebalance.delay.ms": "0",
    "log.cleaner.dedupe.buffer.size": "2097152",  # the default allocates 128 MiB of heap up front
    "num.partitions": "3",
    "num.network.threads": "2",
    "num.io.threads": "2",
    "num.recovery.threads.per.data.dir": "1",
    "log.segment.bytes": "67108864",
    "transaction.max.timeout.ms": "900000",
    # Kafka's defaults (50 partitions each, RF 3: 150 replicas per internal topic) keep the
    # replica fetchers busy on an idle cluster: a three-node cluster with one 24-partition
    # topic idled at 0.14 CPU-s/s against 0.075 with none (2026-11-29). Three partitions,
    # one led per rack, are plenty for a local cluster's groups and transactions.
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    # A follower's fetch waits at the leader until new data arrives (then it returns at once, so
    # acks=all latency does not change) or this long: the default 500 ms keeps idle replica
    # fetchers polling. A three-node cluster with 72 partitions idled at 0.098 CPU-s/s with
    # 5000 ms against 0.159 with the default (2026-11-29); the suite keeps several clusters alive.
    "replica.fetch.wait.max.ms": "5000",
    # The active controller appends a no-op record to the metadata log when it has written
    # nothing for this long (default 500 ms), and every node fetches and applies it: a third of
    # an idle three-node cluster's CPU, 0.120 CPU-s/s against 0.081 with 10 s (2026-11-30). The
    # suite keeps clusters alive for minutes; the records only show the controller is alive.
    "metadata.max.idle.interval.ms": "10000",
}


class KafkaClusterError(RuntimeError):
    """A node did not format, start, become ready or stop (the message has its log's tail)."""


@dataclass(frozen=True)
class Listener:
    """One extra client listener of every node: name, security protocol, and its settings.

    `port_offset` places it beside the PLAINTEXT port in netns mode (port + offset);
    on loopback each node gets a free port. `settings` are per-listener broker keys
    written with the `listener.name.<name>.` prefix where Kafka expects it (the caller
    writes them in full).
    """

    name: str  # "SSL", "SASL_SSL", "SASL_PLAINTEXT", ...
    protocol: str
    port_offset: int
    settings: Mapping[str, str] = field(default_factory=dict)


@dataclass
class KafkaNode:
    """One KRaft node: broker and controller in one JVM."""

    node_id: int
    rack: str
    host: str
    port: int
    controller_port: int
    netns: str | None
    directory: Path
    argv: list[str]
    env: dict[str, str]
    extra_ports: dict[str, int] = field(default_factory=dict)  # listener name -> port
    # Where replication and the quorum listen, when on a link of their own (netns mode:
    # the replication bridge, so its counters tell replication from client bytes).
    internal_host: str | None = None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def listener_bootstrap(self, name: str) -> str:
        return f"{self.host}:{self.extra_ports[name]}"

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        with open(self.directory / "stdout.log", "ab") as out:
            self.proc = subprocess.Popen(_netns_prefix(self.netns) + self.argv, stdout=out, stderr=subprocess.STDOUT,
                                         env=self.env, start_new_session=True)

    def kill(self) -> None:
        """kill -9: no controlled shutdown, no flush."""
        if self.running:
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=STOP_TIMEOUT_S)

    def rss_bytes(self) -> int | None:
        """Resident memory of the JVM (None when not running)."""
        if not self.running:
            return None
        assert self.proc is not None
        for pid in _process_tree(self.proc.pid):
            with contextlib.suppress(OSError):
                status = Path(f"/proc/{pid}/status").read_text()
                if "java" in Path(f"/proc/{pid}/comm").read_text():
                    for line in status.splitlines():
                        if line.startswith("VmRSS:"):
                            return int(line.split()[1]) * 1024
        return None


def _process_tree(pid: int) -> list[int]:
    # `ip netns exec` execs the command, so the JVM is the child's pid itself; children
    # are read too in case a wrapper sits in between.
    out = [pid]
    with contextlib.suppress(OSError):
        out += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return out


@dataclass
class KafkaCluster:
    """A running cluster; `nodes` by node id. Its admin helpers wait (bounded) for the state they ask for."""

    nodes: dict[int, KafkaNode]
    version: str
    cluster_id: str
    directory: Path
    admin_netns: str | None = None  # where admin operations run (netns mode: a zone's namespace)
    admin_security: dict[str, Any] = field(default_factory=dict)
    started_in_s: float = 0.0

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values())

    @property
    def bootstraps(self) -> list[str]:
        return [n.bootstrap for n in self.nodes.values()]

    def listener_bootstrap(self, name: str) -> str:
        return ",".join(n.listener_bootstrap(name) for n in self.nodes.values())

    @property
    def racks(self) -> dict[int, str]:
        return {i: n.rack for i, n in self.nodes.items()}

    def node_of_rack(self, rack: str) -> KafkaNode:
        for node in self.nodes.values():
            if node.rack == rack:
                return node
        raise KeyError(rack)

    # -- lifecycle ------------------------------------------------------------------

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S, node_ids: Sequence[int] | None = None) -> None:
        """Until each running node (or those named) lists every node in a Metadata answer.

        Raises KafkaClusterError when a node exits or the time runs out.
        """
        ids = list(node_ids or self.nodes)
        for i in ids:
            node = self.nodes[i]
            if not node.running:
                raise KafkaClusterError(f"node {i} is not running:\n{_tail(node.log_path, node.directory)}")
        try:
            self.admin("wait_ready", bootstraps=[self.nodes[i].bootstrap for i in ids], brokers=len(self.nodes),
                       timeout_s=timeout_s, timeout=timeout_s + 30)
        except kafka_admin.KafkaAdminError as exc:
            tails = "\n".join(f"--- node {i}:\n{_tail(self.nodes[i].log_path, self.nodes[i].directory)}" for i in ids)
            raise KafkaClusterError(f"cluster not ready: {exc}\n{tails}") from exc

    def start_node(self, node_id: int, wait: bool = True) -> None:
        """(Re)start a stopped or killed node on its log directory; wait until it lists every broker."""
        node = self.nodes[node_id]
        if node.running:
            return
        node.start()
        if wait:
            self.wait_ready(node_ids=[node_id])

    def kill_node(self, node_id: int) -> None:
        self.nodes[node_id].kill()

    def stop_node(self, node_id: int, timeout_s: float = STOP_TIMEOUT_S) -> None:
        _stop_all([self.nodes[node_id]], timeout_s)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM to every node together; kill -9 what has not exited after timeout_s."""
        _stop_all(list(self.nodes.values()), timeout_s)

    def memory(self) -> dict[int, int | None]:
        """RSS bytes per node id."""
        return {i: n.rss_bytes() for i, n in self.nodes.items()}

    # -- admin ----------------------------------------------------------------------

    def admin(self, op: str, timeout: float = ADMIN_TIMEOUT_S + 30, **kwargs: Any) -> Any:
        """Run a deploy.local.kafka_admin operation where the brokers are reachable.

        Raises kafka_admin.KafkaAdminError (the operation's own error, or a dead helper).
        """
        if self.admin_security:
            kwargs.setdefault("security", self.admin_security)
        if self.admin_netns is None:
            return _jsonable(kafka_admin.OPERATIONS[op](**kwargs))
        argv = ["ip", "netns", "exec", self.admin_netns, sys.executable, "-m", "deploy.local.kafka_admin",
                op, json.dumps(kwargs)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                  cwd=str(Path(__file__).resolve().parents[2]))
        except subprocess.TimeoutExpired as exc:
            raise kafka_admin.KafkaAdminError(f"{op} did not finish within {timeout:.0f} s") from exc
        try:
            answer = json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError) as exc:
            raise kafka_admin.KafkaAdminError(f"{op}: no answer (exit {done.returncode}): {done.stderr[-2000:]}") from exc
        if "error" in answer:
            raise kafka_admin.KafkaAdminError(answer["error"])
        return answer["result"]

    def create_topic(self, topic: str, partitions: int, replication_factor: int = 3,
                     configs: Mapping[str, str] | None = None,
                     assignments: Mapping[int, Sequence[int]] | None = None) -> dict[int, dict[str, Any]]:
        """Create a topic (brokers place the replicas unless `assignments` gives them); returns its state."""
        state = self.admin("create_topic", bootstrap=self.bootstrap, topic=topic, partitions=partitions,
                           replication_factor=replication_factor, configs=dict(configs or {}),
                           assignments={str(p): list(r) for p, r in (assignments or {}).items()} or None,
                           timeout_s=ADMIN_TIMEOUT_S)
        return {int(p): s for p, s in state.items()}

    def delete_topics(self, keep: Sequence[str] = ()) -> list[str]:
        """Delete every topic but the internal ones and `keep` (kafka_admin.delete_topics); the names deleted."""
        return list(self.admin("delete_topics", bootstrap=self._live_bootstrap(), keep=list(keep),
                               timeout_s=ADMIN_TIMEOUT_S))

    def describe(self, topic: str) -> dict[int, dict[str, Any]]:
        """{partition: {"leader", "replicas", "isr"}} as the cluster reports it now."""
        return {int(p): s for p, s in self.admin("describe_topic", bootstrap=self._live_bootstrap(),
                                                 topic=topic).items()}

    def leaders(self, topic: str) -> dict[int, int]:
        return {p: s["leader"] for p, s in self.describe(topic).items()}

    def leader_racks(self, topic: str) -> dict[int, str]:
        """{partition: rack of its leader} (a partition without a leader is left out)."""
        return {p: self.nodes[b].rack for p, b in self.leaders(topic).items() if b in self.nodes}

    def move_leader(self, topic: str, partition: int, node_id: int) -> dict[str, Any]:
        """Reorder the replicas so node_id is preferred, then elect it; returns the new state."""
        result: dict[str, Any] = self.admin("move_leader", bootstrap=self._live_bootstrap(), topic=topic,
                                            partition=partition, broker_id=node_id, timeout_s=ADMIN_TIMEOUT_S)
        return result

    def elect_preferred(self) -> dict[str, int]:
        """A preferred-leader election over every partition (kafka_admin.elect_preferred)."""
        result: dict[str, int] = self.admin("elect_preferred", bootstrap=self._live_bootstrap(),
                                            timeout_s=ADMIN_TIMEOUT_S)
        return result

    def _live_bootstrap(self) -> str:
        live = [n.bootstrap for n in self.nodes.values() if n.running]
        return ",".join(live or [self.bootstrap])


def _jsonable(value: Any) -> Any:
    # In-process answers go through the same JSON round trip as the netns helper's, so
    # callers see one shape (string keys) whichever way the operation ran.
    return json.loads(json.dumps(value))


def _netns_prefix(netns: str | None) -> list[str]:
    return ["ip", "netns", "exec", netns] if netns else []


def _tail(path: Path, directory: Path, n: int = 15) -> str:
    lines: list[str] = []
    for p in (path, directory / "stdout.log"):
        with contextlib.suppress(OSError):
            lines += p.read_text(errors="replace").splitlines()[-n:]
    return "\n".join(lines) or "(no log)"


def _stop_all(nodes: Sequence[KafkaNode], timeout_s: float) -> None:
    """SIGTERM to every running node together; kill -9 what is still up after timeout_s.

    Once all but one node of several have exited, the last has no quorum left to finish
    its controlled shutdown with and would wait out the whole timeout: it gets
    LAST_NODE_GRACE_S. Its log is on disk already (a kill -9 loses no page-cache writes).
    """
    running = [n for n in nodes if n.running]
    for node in running:
        assert node.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while running:
        running = [n for n in running if n.running]
        if not running:
            return
        if len(running) == 1 and len(nodes) > 1:
            deadline = min(deadline, time.monotonic() + LAST_NODE_GRACE_S)
        if time.monotonic() > deadline:
            break
        with contextlib.suppress(subprocess.TimeoutExpired):
            assert running[0].proc is not None
            running[0].proc.wait(timeout=STOP_POLL_S)  # woken by an exit, else re-checks the others
    for node in running:
        if node.running:
            log.info("node %s still up after SIGTERM; killing it", node.node_id)
            node.kill()


def java_command(version: str, main_class: str, *args: str, heap_mb: int | None = None,
                 log_dir: Path | None = None, quick_jit: bool = True) -> list[str]:
    """argv for a Kafka main class on the cached classpath (fetched if needed).

    quick_jit stops the JIT at C1: a JVM that runs for seconds or a test's minutes on two
    shared cores spends less CPU compiling. Raises kafka_jars.KafkaJarsError.
    """
    java = shutil.which("java")
    if java is None:
        raise KafkaClusterError("Apache Kafka needs Java 17 (Debian package openjdk-17-jre-headless)")
    argv = [java, "-XX:+UseSerialGC", "-Xss512k", "-XX:MaxMetaspaceSize=160m"]
    archive = class_archive(version)
    if archive.exists():
        # Kafka's classes mapped from the archive instead of loaded and verified one by one:
        # a three-node start took 6.8-8.8 CPU-s with it against 11.6 without (2026-11-29). A
        # JVM whose classpath does not match the archive's ignores it (-Xshare:auto).
        argv += [f"-XX:SharedArchiveFile={archive}"]
    if heap_mb:
        argv += [f"-Xms{heap_mb // 2}m", f"-Xmx{heap_mb}m"]
    if quick_jit:
        argv += ["-XX:TieredStopAtLevel=1"]
    argv += ["-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
             f"-Dkafka.logs.dir={log_dir or tempfile.gettempdir()}", "-cp", classpath(version), main_class, *args]
    return argv


def class_archive(version: str) -> Path:
    """Where the version's class-data sharing archive is kept (made by the first clean cluster stop)."""
    return lib_dir(version).parent / "kafka-classes.jsa"


def build_class_archive(version: str = KAFKA_VERSION, timeout_s: float = 120.0) -> Path | None:
    """Make the version's class-data sharing archive if it has none: a one-node cluster
    starts, creates a topic and stops cleanly, and its JVM writes the classes it loaded
    (a dynamic archive, JDK 13+). Returns the archive, or None when the JVM wrote none
    (logged; clusters then start without it). Raises KafkaClusterError."""
    archive = class_archive(version)
    if archive.exists():
        return archive
    staging = archive.with_name(f"kafka-classes.{uuid.uuid4().hex[:8]}.jsa.tmp")
    try:
        with start_kafka_cluster(("archive",), version=version, record_classes_to=staging,
                                 overrides={"offsets.topic.replication.factor": "1",
                                            "transaction.state.log.replication.factor": "1",
                                            "transaction.state.log.min.isr": "1",
                                            "default.replication.factor": "1", "min.insync.replicas": "1"},
                                 ready_timeout_s=timeout_s) as cluster:
            cluster.create_topic("class-archive", 1, replication_factor=1)
        if staging.exists() and staging.stat().st_size > 0:
            os.replace(staging, archive)  # whole or not at all: concurrent starts never map half of one
            return archive
        log.warning("Kafka %s: the JVM wrote no class-data archive; clusters start without one", version)
        return None
    finally:
        staging.unlink(missing_ok=True)


def _properties(settings: Mapping[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in settings.items())


def _node_settings(node: KafkaNode, voters: str, listeners: Sequence[Listener],
                   overrides: Mapping[str, str]) -> dict[str, str]:
    names = ["PLAINTEXT", *(lst.name for lst in listeners)]
    ports = {"PLAINTEXT": node.port, **node.extra_ports}
    protocol_map = {"PLAINTEXT": "PLAINTEXT", "CONTROLLER": "PLAINTEXT", **{lst.name: lst.protocol for lst in listeners}}
    internal = node.internal_host or node.host
    endpoints = [f"{n}://{node.host}:{ports[n]}" for n in names]
    inter_broker = "PLAINTEXT"
    if node.internal_host:
        # Replication on its own address: followers fetch from the leader's REPLICATION
        # endpoint, so those bytes never share a link with the clients'.
        endpoints.append(f"REPLICATION://{node.internal_host}:{REPLICATION_PORT}")
        protocol_map["REPLICATION"] = "PLAINTEXT"
        inter_broker = "REPLICATION"
    settings = dict(BASE_SETTINGS)
    settings.update({
        "node.id": str(node.node_id),
        "broker.rack": node.rack,
        "listeners": ",".join(endpoints) + f",CONTROLLER://{internal}:{node.controller_port}",
        "advertised.listeners": ",".join(endpoints),
        "listener.security.protocol.map": ",".join(f"{k}:{v}" for k, v in protocol_map.items()),
        "inter.broker.listener.name": inter_broker,
        "controller.quorum.voters": voters,
        "log.dirs": str(node.directory / "data"),
    })
    for lst in listeners:
        settings.update(lst.settings)
    settings.update(overrides)
    return settings


def _format_all(configs: Mapping[int, Path], version: str, cluster_id: str, format_args: Sequence[str] = ()) -> None:
    """StorageTool format of each node's log directory ({node id: its server.properties}), in
    parallel; each writes format.log beside its config. Raises KafkaClusterError."""
    procs = []
    for node_id, config in configs.items():
        argv = java_command(version, "kafka.tools.StorageTool", "format", "-t", cluster_id,
                            "-c", str(config), "--ignore-formatted", *format_args,
                            heap_mb=128, log_dir=config.parent)
        out = open(config.parent / "format.log", "wb")  # noqa: SIM115 - closed below, after the wait
        procs.append((node_id, config, subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT), out))
    failed = []
    for node_id, config, proc, out in procs:
        try:
            code = proc.wait(timeout=FORMAT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = -1
        out.close()
        if code != 0:
            failed.append(f"node {node_id} (exit {code}):\n{_tail(config.parent / 'format.log', config.parent)}")
    if failed:
        raise KafkaClusterError("formatting the log directories failed: " + "\n".join(failed))


def _formatted_logs(nodes: Mapping[int, KafkaNode], settings: Mapping[int, Mapping[str, str]], version: str,
                    format_args: Sequence[str], overrides: Mapping[str, str]) -> str:
    """Fill each node's empty log directory from a formatted template; returns its cluster id.

    Formatting starts three JVMs (~8 s of both cores here); its output (meta.properties with
    the cluster and node ids, the bootstrap metadata) names no address or port, so one
    formatted copy per version, node ids, format arguments and overrides serves every
    later cluster of that shape. The template is made once, in a staging directory renamed
    into place, so concurrent starts (parallel test workers) never see half of one.
    """
    key = hashlib.sha256(json.dumps([version, sorted(nodes), list(format_args), sorted(overrides.items())])
                         .encode()).hexdigest()[:16]
    template = lib_dir(version).parent / "formatted" / key
    if not (template / COMPLETE_MARKER).exists():
        template.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="staging-", dir=template.parent))
        try:
            cluster_id = _cluster_id()
            configs = {}
            for node_id in nodes:
                (staging / f"node-{node_id}" / "data").mkdir(parents=True)
                config = staging / f"node-{node_id}" / "server.properties"
                config.write_text(_properties({**settings[node_id],
                                               "log.dirs": str(staging / f"node-{node_id}" / "data")}))
                configs[node_id] = config
            _format_all(configs, version, cluster_id, format_args)
            (staging / "cluster_id").write_text(cluster_id)
            (staging / COMPLETE_MARKER).write_text(version)
            try:
                staging.rename(template)
            except OSError:  # another process made it meanwhile: theirs is as good
                shutil.rmtree(staging, ignore_errors=True)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    for node_id, node in nodes.items():
        shutil.copytree(template / f"node-{node_id}" / "data", node.directory / "data", dirs_exist_ok=True)
    return (template / "cluster_id").read_text().strip()


@contextlib.contextmanager
def start_kafka_cluster(racks: Sequence[str] = DEFAULT_RACKS, *, hosts: Sequence[str] | None = None,
                        netns: Sequence[str | None] | None = None,
                        internal_hosts: Sequence[str | None] | None = None,
                        log_dir: Path | str | None = None,
                        version: str = KAFKA_VERSION, heap_mb: int = HEAP_MB,
                        overrides: Mapping[str, str] | None = None, listeners: Sequence[Listener] = (),
                        admin_security: Mapping[str, Any] | None = None, format_args: Sequence[str] = (),
                        ready_timeout_s: float = READY_TIMEOUT_S,
                        record_classes_to: Path | None = None) -> Iterator[KafkaCluster]:
    """Start one KRaft node per rack (node ids 1..n) and yield the ready cluster; stop it on exit.

    hosts/netns (one per rack): where each node listens (netns mode: the zone's bridge
    address and namespace, ports 9093/9094); default 127.0.0.1 with free ports. Admin
    operations then run in the first node's namespace. internal_hosts (one per rack):
    an address of each node's own for replication (port 9095) and the quorum, so their
    bytes travel a link of their own. Without log_dir the cluster lives
    in a temporary directory, removed after a clean stop; with it, the nodes' logs stay there
    and their data directories are removed after a clean stop. Raises KafkaClusterError,
    kafka_jars.KafkaJarsError, ValueError.

    format_args: more `StorageTool format` arguments, e.g. `--add-scram` users
    (kafka_security.scram_format_args), written into the bootstrap metadata of every node.
    record_classes_to: node 1 writes the classes it loaded there when it exits, and the
    cluster stops with time for it (build_class_archive).
    """
    if not racks or len(set(racks)) != len(racks):
        raise ValueError(f"distinct racks, one per node, got {racks!r}")
    hosts = list(hosts or ["127.0.0.1"] * len(racks))
    namespaces = list(netns or [None] * len(racks))
    internal = list(internal_hosts or [None] * len(racks))
    if len(hosts) != len(racks) or len(namespaces) != len(racks) or len(internal) != len(racks):
        raise ValueError("hosts, netns and internal_hosts need one entry per rack")
    root = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="azsidecar-kafka-"))
    own_dir = not log_dir
    keep_logs_only = bool(log_dir)
    root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    nodes: dict[int, KafkaNode] = {}
    for i, rack in enumerate(racks, start=1):
        in_netns = namespaces[i - 1] is not None
        port = NETNS_PORT if in_netns else free_port(hosts[i - 1])
        controller = NETNS_CONTROLLER_PORT if in_netns else free_port(hosts[i - 1])
        extra = {lst.name: (port + lst.port_offset if in_netns else free_port(hosts[i - 1])) for lst in listeners}
        directory = root / f"node-{i}"
        (directory / "data").mkdir(parents=True, exist_ok=True)
        nodes[i] = KafkaNode(node_id=i, rack=rack, host=hosts[i - 1], port=port, controller_port=controller,
                             netns=namespaces[i - 1], directory=directory, argv=[], env=dict(os.environ),
                             extra_ports=extra, internal_host=internal[i - 1])
    voters = ",".join(f"{n.node_id}@{n.internal_host or n.host}:{n.controller_port}" for n in nodes.values())
    settings = {i: _node_settings(node, voters, listeners, overrides or {}) for i, node in nodes.items()}
    for i, node in nodes.items():
        (node.directory / "server.properties").write_text(_properties(settings[i]))
        node.argv = java_command(version, "kafka.Kafka", str(node.directory / "server.properties"),
                                 heap_mb=heap_mb, log_dir=node.directory)
    cluster = KafkaCluster(nodes=nodes, version=version, cluster_id="", directory=root,
                           admin_netns=namespaces[0], admin_security=dict(admin_security or {}))
    if record_classes_to is not None:
        nodes[1].argv = [a for a in nodes[1].argv if not a.startswith("-XX:SharedArchiveFile=")]
        nodes[1].argv.insert(1, f"-XX:ArchiveClassesAtExit={record_classes_to}")
    try:
        cluster.cluster_id = _formatted_logs(nodes, settings, version, format_args, overrides or {})
        for node in nodes.values():
            node.start()
        cluster.wait_ready(ready_timeout_s)
        cluster.started_in_s = time.monotonic() - started
        log.info("Apache Kafka %s up in %.1f s: %s", version, cluster.started_in_s,
                 ", ".join(f"{n.node_id}={n.bootstrap}({n.rack})" for n in nodes.values()))
        yield cluster
    except BaseException:
        if own_dir:
            log.warning("Kafka cluster ended with an error; its logs are kept in %s", root)
        own_dir = keep_logs_only = False
        raise
    finally:
        cluster.stop(STOP_TIMEOUT_S if record_classes_to is None else ARCHIVE_STOP_TIMEOUT_S)
        if own_dir:
            shutil.rmtree(root, ignore_errors=True)
        elif keep_logs_only:
            # A caller's log_dir keeps the nodes' logs; their partitions (gigabytes after a
            # saturated benchmark) are of no use once the cluster stopped cleanly.
            for node in nodes.values():
                shutil.rmtree(node.directory / "data", ignore_errors=True)


def _cluster_id() -> str:
    # Kafka's cluster ids are a UUID in URL-safe base64 without padding (StorageTool random-uuid).
    import base64  # noqa: PLC0415

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
