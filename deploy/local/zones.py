"""Three availability zones on one machine: network namespaces, one bridge, metered bytes.

Strategy. As root, every zone is a network namespace with two links:

- `xzone`, a veth pair whose other end is a port of one bridge in the root namespace.
  This bridge is the inter-zone link and nothing else uses it: the root namespace has no
  address on it. The byte counters of the bridge ports (root side of each veth) are the
  ground truth for bytes that crossed a zone boundary.
- `s3link`, a veth pair to a separate "s3" namespace where moto runs, so S3 traffic
  never touches the bridge (like a VPC gateway endpoint, free per byte on AWS).

Every name carries `PREFIX` and a per-run id, so parallel runs never collide, and a
state file records the owning process so `cleanup_leftovers` removes only the remains
of runs whose owner is dead. Teardown (processes, namespaces, veths, bridge) runs on
normal exit, on exceptions, on Ctrl-C and on SIGTERM.

Without root (or with mode="loopback") everything runs on 127.0.0.1 and the meter says
"unmetered": there is no link whose counters mean "crossed a zone".

Brokers: Apache Kafka (the demo's default), one KRaft node per zone with `broker.rack` = the zone
(deploy/local/kafka_cluster.py). Leadership is then Kafka's own: the brokers place each
partition's replicas across the racks and the proxies read the leader's rack from
Metadata. Replication and the controller quorum use a third link per zone, `repl`, to a
bridge of their own, so the meter tells replication bytes (a cost of running Kafka
across zones, not of producing) from the clients' bytes on the `xzone` bridge.

With `broker="tansu"` every zone runs a Tansu broker sharing one bucket. Tansu names
itself leader of every partition, so the zone that "leads" a partition is a convention:
partition p of every topic leads in zone p % len(zones). The router enforces it through
its `partition_zones` override map (`partition_zones()`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from deploy.local.frame_tally import FrameTally
from deploy.local.kafka_cluster import KafkaCluster, start_kafka_cluster
from deploy.local.kafka_jars import KAFKA_VERSION
from deploy.local.leader_zones import leader_zone_of as leader_zone_of  # re-exported: the environment's names
from deploy.local.leader_zones import partition_zones
from deploy.local.port_capture import PortCapture
from deploy.local.processes import (
    MotoServer,
    TansuBroker,
    free_port,
    start_moto,
    start_tansu,
    stop_process,
)
from deploy.local.tcp_counters import difference, read_tcp_ext

log = logging.getLogger(__name__)

DEFAULT_ZONES = ("use1-az1", "use1-az2", "use1-az3")
PREFIX = "azs-"  # every namespace, interface and state file of this module starts with it
RUN_ID_HEX = 5  # 4+5+3 = 12 characters for "azs-xxxxx-b0": interface names are limited to 15
MAX_ZONES = 9  # one digit in interface names; addresses 10.214.N.0/30 per zone
BRIDGE_PREFIX = "10.213.0"  # zone i is 10.213.0.(i+1)/24 on the inter-zone bridge
S3_LINK_PREFIX = "10.214"  # zone i: 10.214.i.2/30, the s3 namespace 10.214.i.1/30
REPLICATION_PREFIX = "10.215.0"  # zone i is 10.215.0.(i+1)/24 on the replication bridge (Kafka)
REPLICATION_IF = "repl"  # the zone's end of the replication link, inside its namespace
BROKERS = ("kafka", "tansu")
S3_PORT = 4566  # moto in its own namespace, so any fixed port is free there
BROKER_PORT = 9093  # Tansu on the zone address; 9092 stays for the sidecar on 127.0.0.1
SIDECAR_PORT = 9092  # what producers use as bootstrap.servers inside a zone
ZONE_IF = "xzone"  # the zone's end of the bridge link, inside its namespace
S3_IF = "s3link"  # the zone's end of the S3 link, inside its namespace
IP_TIMEOUT_S = 10.0  # one `ip` invocation; they take milliseconds
# Segmentation and receive offloads of a veth: off, every packet on the metered bridge is at
# most MTU-sized with its own headers and ACKs, as on a real network (ethtool features).
OFFLOAD_FEATURES = ("tso", "gso", "gro")
STATE_DIR = Path("/run/azsidecar-zones") if os.access("/run", os.W_OK) else Path(tempfile.gettempdir()) / "azsidecar-zones"


class ZoneSetupError(RuntimeError):
    """Creating namespaces, links or addresses failed (the message has `ip`'s stderr)."""


@dataclass(frozen=True)
class Zone:
    """One zone as processes in it see it."""

    name: str  # AZ id, "use1-az1"
    index: int
    netns: str | None  # None in loopback mode
    address: str  # on the inter-zone bridge (loopback mode: 127.0.0.1)
    s3_endpoint: str  # moto as reached from this zone
    broker_bootstrap: str  # this zone's Tansu broker
    sidecar_host: str = "127.0.0.1"
    sidecar_port: int = SIDECAR_PORT
    bridge_port: str | None = None  # root-namespace end of the bridge link; None = unmetered
    replication_address: str | None = None  # Kafka in netns mode: the node's replication address
    replication_port: str | None = None  # root-namespace end of the replication link (its meter)

    @property
    def sidecar_bootstrap(self) -> str:
        return f"{self.sidecar_host}:{self.sidecar_port}"


@dataclass(frozen=True)
class LinkBytes:
    """Bytes and packets a zone sent onto and received from a link over an interval."""

    sent_bytes: int
    received_bytes: int
    sent_packets: int
    received_packets: int


@dataclass(frozen=True)
class CrossZoneReading:
    """Inter-zone traffic per zone over one interval. `status` is "metered" or "unmetered"."""

    status: str
    per_zone: Mapping[str, LinkBytes]
    interval_s: float
    # The same frames taken apart (ZoneEnv.capture_frames): data segments, ACKs, Kafka APIs.
    frames: FrameTally | None = None
    frames_dropped: int = 0  # frames the capture missed (the tally then undercounts)
    # With the frames, each zone's TCP counters over the interval (deploy/local/tcp_counters.py):
    # why a segment went twice (a receiver's drop, a timeout, a probe), which the frames cannot say.
    tcp_counters: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    @property
    def metered(self) -> bool:
        return self.status == "metered"

    @property
    def total_bytes(self) -> int | None:
        """Bytes put onto the inter-zone link (each crossing byte counted once); None if unmetered."""
        if not self.metered:
            return None
        return sum(z.sent_bytes for z in self.per_zone.values())

    @property
    def total_packets(self) -> int | None:
        if not self.metered:
            return None
        return sum(z.sent_packets for z in self.per_zone.values())

    def as_dict(self) -> dict[str, object]:
        return {"status": self.status, "interval_s": self.interval_s, "total_bytes": self.total_bytes,
                "per_zone": {name: vars(b) for name, b in self.per_zone.items()},
                **({} if self.frames is None else {"frames": self.frames.as_dict(),
                                                   "frames_dropped": self.frames_dropped,
                                                   "tcp_counters": {z: dict(c) for z, c in self.tcp_counters.items()}})}


def _read_counters(port: str) -> LinkBytes:
    # The bridge port is the root end of the zone's veth: what the zone sent arrives as rx.
    stats = Path("/sys/class/net") / port / "statistics"

    def read(name: str) -> int:
        return int((stats / name).read_text())

    return LinkBytes(sent_bytes=read("rx_bytes"), received_bytes=read("tx_bytes"),
                     sent_packets=read("rx_packets"), received_packets=read("tx_packets"))


class CrossZoneMeter:
    """Reads the bridge-port counters at start() and stop(); the difference is the interval.

    `link` names the zones' port attribute to read: "bridge_port" (clients' traffic) or
    "replication_port" (Kafka's replication and quorum). With `capture_server_ports` the
    frames are also read and taken apart (PortCapture), requests being the frames towards
    those ports.
    """

    def __init__(self, zones: Sequence[Zone], link: str = "bridge_port",
                 capture_server_ports: Collection[int] | None = None) -> None:
        self._zones = tuple(zones)
        self._link = link
        self._start: dict[str, LinkBytes] | None = None
        self._started_at = 0.0
        self._capture_server_ports = capture_server_ports
        self._capture: PortCapture | None = None
        self._tcp_start: dict[str, dict[str, int]] = {}

    def _tcp_snapshot(self) -> dict[str, dict[str, int]]:
        return {z.name: read_tcp_ext(z.netns) for z in self._zones if z.netns is not None}

    def _port(self, zone: Zone) -> str | None:
        port: str | None = getattr(zone, self._link)
        return port

    @property
    def metered(self) -> bool:
        return all(self._port(z) is not None for z in self._zones)

    def _snapshot(self) -> dict[str, LinkBytes]:
        return {z.name: _read_counters(port) for z in self._zones if (port := self._port(z)) is not None}

    def start(self) -> None:
        if self.metered and self._capture_server_ports is not None:
            self._capture = PortCapture([p for z in self._zones if (p := self._port(z)) is not None],
                                        self._capture_server_ports)
            self._capture.start()
            self._tcp_start = self._tcp_snapshot()
        self._start = self._snapshot() if self.metered else {}
        self._started_at = time.monotonic()

    def stop(self) -> CrossZoneReading:
        """Raises RuntimeError if start() was not called."""
        if self._start is None:
            raise RuntimeError("CrossZoneMeter.stop() before start()")
        interval_s = time.monotonic() - self._started_at
        if not self.metered:
            return CrossZoneReading("unmetered", {}, interval_s)
        end = self._snapshot()
        per_zone = {
            name: LinkBytes(*(getattr(end[name], f) - getattr(before, f)
                              for f in ("sent_bytes", "received_bytes", "sent_packets", "received_packets")))
            for name, before in self._start.items()
        }
        self._start = None
        frames, dropped, tcp = None, 0, {}
        if self._capture is not None:
            frames, dropped = self._capture.stop(), self._capture.dropped
            self._capture = None
            end_tcp = self._tcp_snapshot()
            tcp = {name: difference(before, end_tcp.get(name, {})) for name, before in self._tcp_start.items()}
        return CrossZoneReading("metered", per_zone, interval_s, frames, dropped, tcp)

    @contextlib.contextmanager
    def measure(self) -> Iterator[list[CrossZoneReading]]:
        """`with meter.measure() as out: ...` then out[0] is the reading."""
        out: list[CrossZoneReading] = []
        self.start()
        yield out
        out.append(self.stop())


# -- running processes ------------------------------------------------------------------

class ZoneProcess(subprocess.Popen[bytes]):
    """A process ZoneEnv.run_in_zone started: a Popen whose output is appended to `log_path`."""

    log_path: Path


@dataclass
class ZoneEnv:
    """A running environment: zones, S3, brokers, and every process started in it."""

    zones: tuple[Zone, ...]
    mode: str  # "netns" or "loopback"
    run_id: str
    log_dir: Path
    bucket: str | None = None  # the bucket the brokers share
    s3_namespace: str | None = None
    brokers: dict[str, TansuBroker] = field(default_factory=dict)  # broker="tansu"
    kafka: KafkaCluster | None = None  # broker="kafka"
    moto: MotoServer | None = None
    capture_frames: bool = False  # the clients' meter also takes the frames apart (CrossZoneReading.frames)
    _procs: list[ZoneProcess] = field(default_factory=list)

    @property
    def metered(self) -> bool:
        return self.mode == "netns"

    def zone(self, name_or_index: str | int) -> Zone:
        if isinstance(name_or_index, int):
            return self.zones[name_or_index]
        for z in self.zones:
            if z.name == name_or_index:
                return z
        raise KeyError(name_or_index)

    @property
    def zone_names(self) -> tuple[str, ...]:
        return tuple(z.name for z in self.zones)

    def meter(self) -> CrossZoneMeter:
        ports = {int(z.broker_bootstrap.rsplit(":", 1)[1]) for z in self.zones if z.broker_bootstrap}
        return CrossZoneMeter(self.zones, capture_server_ports=ports if self.capture_frames else None)

    def replication_meter(self) -> CrossZoneMeter:
        """Kafka's replication and quorum bytes between zones (unmetered without Kafka in netns)."""
        return CrossZoneMeter(self.zones, link="replication_port")

    @property
    def broker(self) -> str:
        return "kafka" if self.kafka is not None else "tansu"

    @property
    def cluster_bootstrap(self) -> str:
        """Every zone's broker: a Kafka client finds the leaders from any of them."""
        return ",".join(z.broker_bootstrap for z in self.zones)

    def partition_zones(self, max_partitions: int, topic_glob: str = "*") -> dict[str, str]:
        return partition_zones(self.zone_names, max_partitions, topic_glob)

    def restart_stopped_brokers(self) -> list[int]:
        """Start every Kafka node that is not running (killed by a fault and left down) and wait
        until the cluster lists all of them; returns the node ids restarted. Raises
        KafkaClusterError when a node does not come back."""
        if self.kafka is None:
            return []
        stopped = [i for i, node in self.kafka.nodes.items() if not node.running]
        for node_id in stopped:
            self.kafka.start_node(node_id, wait=False)
        if stopped:
            self.kafka.wait_ready()
        return stopped

    def run_in_zone(self, zone: Zone | str | int, argv: Sequence[str], env: Mapping[str, str] | None = None,
                    log_name: str | None = None) -> ZoneProcess:
        """Start argv inside the zone; output goes to log_dir/<log_name>.log (default: argv[0]).

        The process is stopped at teardown if still running. Raises OSError if argv
        cannot be started.
        """
        z = zone if isinstance(zone, Zone) else self.zone(zone)
        name = log_name or f"{z.name}-{Path(argv[0]).name}"
        log_path = self.log_dir / f"{name}.log"
        full_env = {**os.environ, **(env or {})}
        with open(log_path, "ab") as out:
            proc = ZoneProcess(_netns_prefix(z.netns) + list(argv), stdout=out, stderr=subprocess.STDOUT,
                               env=full_env, start_new_session=True)
        proc.log_path = log_path
        self._procs.append(proc)
        return proc

    def run_beside_s3(self, argv: Sequence[str], env: Mapping[str, str] | None = None,
                      log_name: str | None = None) -> ZoneProcess:
        """Start argv where moto is local (the s3 namespace; loopback mode: here), at `s3_local_endpoint`.

        For tools that inspect the bucket without touching any zone's links. Stopped at teardown.
        """
        name = log_name or f"s3-{Path(argv[0]).name}"
        s3_zone = Zone(name="s3", index=-1, netns=self.s3_namespace, address="127.0.0.1",
                       s3_endpoint=self.s3_local_endpoint, broker_bootstrap="")
        return self.run_in_zone(s3_zone, argv, env, log_name=name)

    @property
    def s3_local_endpoint(self) -> str:
        """moto's endpoint for processes started with run_beside_s3 (raises RuntimeError without S3)."""
        if self.moto is None:
            raise RuntimeError("this environment has no S3 (start_s3=False)")
        return f"http://127.0.0.1:{self.moto.port}"

    def create_bucket(self, name: str) -> None:
        """Create a bucket in moto, from wherever moto is reachable. Raises ZoneSetupError, RuntimeError."""
        _create_bucket_in(self.s3_namespace, self.s3_local_endpoint, name)

    def run_to_completion(self, zone: Zone | str | int, argv: Sequence[str], timeout_s: float,
                          env: Mapping[str, str] | None = None, log_name: str | None = None) -> int:
        """run_in_zone and wait; returns the exit code. Raises subprocess.TimeoutExpired (process killed)."""
        proc = self.run_in_zone(zone, argv, env, log_name)
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
            raise

    def link_counters_s3(self, zone: Zone | str | int) -> LinkBytes | None:
        """The zone's S3-link counters (cumulative; None in loopback mode)."""
        z = zone if isinstance(zone, Zone) else self.zone(zone)
        if z.netns is None:
            return None
        out = _ip("-n", z.netns, "-s", "-j", "link", "show", S3_IF)
        stats = json.loads(out)[0]["stats64"]
        return LinkBytes(sent_bytes=stats["tx"]["bytes"], received_bytes=stats["rx"]["bytes"],
                         sent_packets=stats["tx"]["packets"], received_packets=stats["rx"]["packets"])

    def _stop_processes(self) -> None:
        for proc in reversed(self._procs):
            try:
                stop_process(proc)
            except Exception:  # noqa: BLE001 - teardown must go on to the next process
                log.exception("stopping pid %s", proc.pid)


def _netns_prefix(netns: str | None) -> list[str]:
    return ["ip", "netns", "exec", netns] if netns else []


def _ip(*args: str) -> str:
    """Run `ip args...`; raises ZoneSetupError with ip's stderr on failure."""
    try:
        done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ZoneSetupError(f"ip {' '.join(args)}: {exc}") from exc
    if done.returncode != 0:
        raise ZoneSetupError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _sysctl_in(netns: str, *settings: str) -> None:
    done = subprocess.run(["ip", "netns", "exec", netns, "sysctl", "-qw", *settings],
                          capture_output=True, text=True, timeout=IP_TIMEOUT_S)
    if done.returncode != 0:
        raise ZoneSetupError(f"sysctl in {netns}: {done.stderr.strip()}")


def _offloads_off(netns: str | None, ifname: str) -> None:
    """`ethtool -K ifname tso off gso off gro off` (inside netns when given).

    Raises ZoneSetupError when ethtool is missing or refuses.
    """
    if shutil.which("ethtool") is None:
        raise ZoneSetupError("offloads off needs ethtool (Debian package `ethtool`; `make setup` installs it)")
    argv = _netns_prefix(netns) + ["ethtool", "-K", ifname]
    for feature in OFFLOAD_FEATURES:
        argv += [feature, "off"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=IP_TIMEOUT_S)
    if done.returncode != 0:
        raise ZoneSetupError(f"ethtool -K {ifname}: {done.stderr.strip()}")


def _disable_ipv6_root(ifname: str) -> None:
    # IPv6 router/neighbour solicitations would put stray bytes on the metered ports.
    path = Path("/proc/sys/net/ipv6/conf") / ifname / "disable_ipv6"
    if path.exists():
        path.write_text("1")


def netns_available() -> bool:
    """True when we can create network namespaces: root and the `ip` tool."""
    return os.geteuid() == 0 and shutil.which("ip") is not None


# -- state files: which run owns which names --------------------------------------------

def _process_start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22 (starttime) counts after the ")" that closes the command name.
    return stat.rsplit(")", 1)[1].split()[19]


def _write_state(run_id: str) -> Path:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    path = STATE_DIR / f"{PREFIX}{run_id}.json"
    # Written aside and renamed: a parallel run's cleanup_leftovers that read the file while
    # half written would take this run for dead, delete its state, and a later cleanup
    # would then remove this run's namespaces while it runs.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "start": _process_start_time(os.getpid())}))
    tmp.replace(path)
    return path


def _owner_alive(run_id: str) -> bool:
    try:
        state = json.loads((STATE_DIR / f"{PREFIX}{run_id}.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(_process_start_time(state["pid"]) == state["start"])  # json's values are Any


def _run_id_of(name: str, prefix: str) -> str:
    return name[len(prefix):].split("-", 1)[0]


def _namespaces() -> list[str]:
    return [line.split()[0] for line in _ip("netns", "list").splitlines() if line.strip()]


def _kill_namespace_processes(netns: str) -> None:
    try:
        pids = [int(p) for p in _ip("netns", "pids", netns).split()]
    except ZoneSetupError:
        return
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _remove_run(run_id: str, prefix: str = PREFIX) -> list[str]:
    """Delete every namespace and root interface of one run; returns what was removed."""
    removed = []
    for ns in _namespaces():
        if ns.startswith(f"{prefix}{run_id}-"):
            _kill_namespace_processes(ns)
            with contextlib.suppress(ZoneSetupError):
                _ip("netns", "del", ns)
                removed.append(f"netns {ns}")
    for link in json.loads(_ip("-j", "link", "show") or "[]"):
        name = link.get("ifname", "")
        if name.startswith(f"{prefix}{run_id}-"):
            with contextlib.suppress(ZoneSetupError):
                _ip("link", "del", name)
                removed.append(f"link {name}")
    with contextlib.suppress(OSError):
        (STATE_DIR / f"{prefix}{run_id}.json").unlink()
    return removed


def cleanup_leftovers(prefix: str = PREFIX) -> list[str]:
    """Remove namespaces, interfaces and state of earlier runs whose owner process is dead.

    Runs of live processes (parallel tests, another demo) are left alone. Returns a line
    per removed object. Raises ZoneSetupError if `ip` itself fails.
    """
    run_ids = {_run_id_of(ns, prefix) for ns in _namespaces() if ns.startswith(prefix)}
    run_ids |= {_run_id_of(link.get("ifname", ""), prefix)
                for link in json.loads(_ip("-j", "link", "show") or "[]")
                if link.get("ifname", "").startswith(prefix)}
    if STATE_DIR.exists():
        run_ids |= {p.stem[len(prefix):] for p in STATE_DIR.glob(f"{prefix}*.json")}
    removed = []
    for run_id in sorted(run_ids):
        if not _owner_alive(run_id):
            removed += _remove_run(run_id, prefix)
    return removed


# -- the context manager ----------------------------------------------------------------

def _build_netns(run_id: str, names: Sequence[str], segment_per_packet: bool,
                 offloads: bool = True, replication_link: bool = False,
                 link_mtu: int | None = None) -> tuple[list[Zone], str]:
    base = f"{PREFIX}{run_id}"
    s3_ns = f"{base}-s3"
    bridge = f"{base}-br"
    repl_bridge = f"{base}-rb"
    if replication_link:
        _ip("link", "add", repl_bridge, "type", "bridge", "mcast_snooping", "0")
        _disable_ipv6_root(repl_bridge)
        _ip("link", "set", repl_bridge, "up")
    _ip("netns", "add", s3_ns)
    _ip("-n", s3_ns, "link", "set", "lo", "up")
    _sysctl_in(s3_ns, "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
    # No multicast snooping: with it the bridge itself joins 224.0.0.106 and sends IGMP
    # reports to every port, bytes no zone sent.
    _ip("link", "add", bridge, "type", "bridge", "mcast_snooping", "0")
    _disable_ipv6_root(bridge)
    _ip("link", "set", bridge, "up")
    zones = []
    for i, name in enumerate(names):
        ns = f"{base}-{name}"
        port = f"{base}-b{i}"
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        _sysctl_in(ns, "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
        # Inter-zone link: veth whose root end is a bridge port (the metered counters).
        _ip("link", "add", port, "type", "veth", "peer", "name", ZONE_IF, "netns", ns)
        _disable_ipv6_root(port)
        _ip("link", "set", port, "master", bridge, "up")
        address = f"{BRIDGE_PREFIX}.{i + 1}"
        _ip("-n", ns, "addr", "add", f"{address}/24", "dev", ZONE_IF)
        if segment_per_packet:
            # One TCP segment per skb: the counters then add a header per MTU-sized packet,
            # as a real wire does, instead of one per 64 KB GSO super-packet.
            _ip("-n", ns, "link", "set", "dev", ZONE_IF, "gso_max_segs", "1")
            _ip("link", "set", "dev", port, "gso_max_segs", "1")
        if not offloads:
            _offloads_off(ns, ZONE_IF)
            _offloads_off(None, port)
        if link_mtu is not None:
            # Both ends of the link; the bridge takes the smallest MTU of its ports.
            _ip("-n", ns, "link", "set", "dev", ZONE_IF, "mtu", str(link_mtu))
            _ip("link", "set", "dev", port, "mtu", str(link_mtu))
        _ip("-n", ns, "link", "set", ZONE_IF, "up")
        # S3 link: a point-to-point veth into the s3 namespace, never via the bridge.
        s3_peer = f"z{i}"
        _ip("-n", ns, "link", "add", S3_IF, "type", "veth", "peer", "name", s3_peer, "netns", s3_ns)
        _ip("-n", ns, "addr", "add", f"{S3_LINK_PREFIX}.{i}.2/30", "dev", S3_IF)
        _ip("-n", s3_ns, "addr", "add", f"{S3_LINK_PREFIX}.{i}.1/30", "dev", s3_peer)
        _ip("-n", ns, "link", "set", S3_IF, "up")
        _ip("-n", s3_ns, "link", "set", s3_peer, "up")
        repl_address = repl_port = None
        if replication_link:
            # Kafka's replication and quorum: a link and bridge of their own, metered apart.
            repl_port = f"{base}-r{i}"
            repl_address = f"{REPLICATION_PREFIX}.{i + 1}"
            _ip("link", "add", repl_port, "type", "veth", "peer", "name", REPLICATION_IF, "netns", ns)
            _disable_ipv6_root(repl_port)
            _ip("link", "set", repl_port, "master", repl_bridge, "up")
            _ip("-n", ns, "addr", "add", f"{repl_address}/24", "dev", REPLICATION_IF)
            if not offloads:
                _offloads_off(ns, REPLICATION_IF)
                _offloads_off(None, repl_port)
            _ip("-n", ns, "link", "set", REPLICATION_IF, "up")
        zones.append(Zone(name=name, index=i, netns=ns, address=address,
                          s3_endpoint=f"http://{S3_LINK_PREFIX}.{i}.1:{S3_PORT}",
                          broker_bootstrap=f"{address}:{BROKER_PORT}", bridge_port=port,
                          replication_address=repl_address, replication_port=repl_port))
    return zones, s3_ns


def set_link_mtu(env: ZoneEnv, mtu: int) -> None:
    """Set the MTU of every inter-zone link, both ends (netns mode); connections opened
    afterwards use it. Raises ZoneSetupError when `ip` refuses, ValueError in loopback mode."""
    if env.mode != "netns":
        raise ValueError("set_link_mtu: netns mode only (loopback has no inter-zone link)")
    for zone in env.zones:
        if zone.netns is None or zone.bridge_port is None:
            raise ValueError(f"zone {zone.name} has no inter-zone link")
        _ip("-n", zone.netns, "link", "set", "dev", ZONE_IF, "mtu", str(mtu))
        _ip("link", "set", "dev", zone.bridge_port, "mtu", str(mtu))


def _create_bucket_in(netns: str | None, endpoint: str, bucket: str) -> None:
    """Create the bucket with an unsigned PUT (moto does not check signatures)."""
    script = ("import http.client,sys,urllib.parse as u;e=u.urlsplit(sys.argv[1]);"
              "c=http.client.HTTPConnection(e.hostname,e.port,timeout=10);c.request('PUT','/'+sys.argv[2]);"
              "r=c.getresponse();sys.exit(0 if r.status==200 else r.status)")
    done = subprocess.run(_netns_prefix(netns) + [sys.executable, "-c", script, endpoint, bucket],
                          capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise ZoneSetupError(f"create bucket {bucket} at {endpoint}: exit {done.returncode} {done.stderr.strip()}")


class ZonesTerminated(BaseException):
    """SIGTERM turned into an exception so the teardown in `finally` runs."""


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    import threading  # noqa: PLC0415

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:  # noqa: ARG001
        raise ZonesTerminated(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def three_zones(zones: Sequence[str] = DEFAULT_ZONES, *, mode: str = "auto", start_s3: bool = True,
                start_brokers: bool = True, log_dir: Path | str | None = None,
                cleanup_first: bool = True, segment_per_packet: bool = False,
                offloads: bool = True, brokers_own_s3: bool = False, broker: str = "tansu",
                kafka_version: str | None = None, link_mtu: int | None = None,
                capture_frames: bool = False) -> Iterator[ZoneEnv]:
    """Zones, S3 (moto) and a broker per zone; all torn down on exit.

    broker "kafka": a three-node Apache Kafka cluster (kafka_version, default the newest
    pinned), one node per zone with the zone as its rack, replication on links of its own
    in netns mode (the demo's default). broker "tansu" (this function's default, which the
    campaigns and most end-to-end tests still use): one Tansu broker per zone sharing a
    bucket (start_brokers then needs start_s3).

    mode: "netns" (root: namespaces, metered), "loopback" (127.0.0.1, unmetered) or
    "auto" (netns when root). start_brokers needs start_s3. Without log_dir the processes
    log to a temporary directory, removed when the block ends cleanly and kept (its path
    logged) when it ends with an error. segment_per_packet makes the
    bridge links carry MTU-sized packets (no GSO), so metered header bytes match a real
    network; by default the kernel's 64 KB GSO packets carry one header each. offloads=False
    turns TSO, GSO and GRO off on both ends of every bridge link (`ethtool -K`): 1,500-byte
    packets each way and one ACK per packet pair or so, as a real network carries them (netns
    mode only; loopback ignores it). brokers_own_s3 (loopback mode only) gives the brokers'
    logs a moto server of their own, so a broker's append does not queue in the one moto
    process behind the WAL's PUTs and GETs (a real cluster's disks are not the WAL's S3);
    `env.moto` stays the WAL's. Raises ZoneSetupError when
    the network cannot be built, RuntimeError when moto or a broker does not start, and
    ValueError on bad arguments. On SIGTERM inside the block the environment is torn
    down and ZonesTerminated (a BaseException) propagates.

    link_mtu (netns mode): the MTU of the inter-zone links (default the veths' 1,500; 9,001
    as inside an AWS VPC). capture_frames (netns mode): the clients' meter also reads every
    frame and takes it apart (CrossZoneReading.frames; deploy/local/frame_tally.py).
    """
    names = tuple(zones)
    if not names or len(names) > MAX_ZONES or len(set(names)) != len(names):
        raise ValueError(f"1..{MAX_ZONES} distinct zone names, got {names!r}")
    if broker not in BROKERS:
        raise ValueError(f"broker: one of {BROKERS}, got {broker!r}")
    if start_brokers and broker == "tansu" and not start_s3:
        raise ValueError("start_brokers needs start_s3 (the brokers store their logs in S3)")
    if brokers_own_s3 and broker != "tansu":
        raise ValueError("brokers_own_s3: Tansu brokers only")
    if mode == "auto":
        mode = "netns" if netns_available() else "loopback"
    if mode not in ("netns", "loopback"):
        raise ValueError(f"mode: 'auto', 'netns' or 'loopback', got {mode!r}")
    if brokers_own_s3 and mode != "loopback":
        raise ValueError("brokers_own_s3: loopback mode only")
    if mode == "netns" and not netns_available():
        raise ZoneSetupError("netns mode needs root and iproute2 (`ip`)")
    run_id = secrets.token_hex(RUN_ID_HEX)[:RUN_ID_HEX]
    log_path = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix=f"{PREFIX}{run_id}-logs-"))
    log_path.mkdir(parents=True, exist_ok=True)
    own_logs = not log_dir  # a temporary directory of ours: removed after a clean run
    try:
        with _sigterm_raises(), contextlib.ExitStack() as stack:
            if mode == "netns":
                if cleanup_first:
                    for line in cleanup_leftovers():
                        log.info("removed leftover %s", line)
                _write_state(run_id)
                stack.callback(_remove_run, run_id)
                zone_list, s3_ns = _build_netns(run_id, names, segment_per_packet, offloads,
                                                replication_link=start_brokers and broker == "kafka",
                                                link_mtu=link_mtu)
            else:
                s3_ns = None
                zone_list = [Zone(name=name, index=i, netns=None, address="127.0.0.1", s3_endpoint="",
                                  broker_bootstrap="", sidecar_port=free_port()) for i, name in enumerate(names)]
            env = ZoneEnv(zones=tuple(zone_list), mode=mode, run_id=run_id, log_dir=log_path, s3_namespace=s3_ns,
                          capture_frames=capture_frames and mode == "netns")
            if start_s3:
                if mode == "netns":
                    env.moto = stack.enter_context(start_moto(host="0.0.0.0", port=S3_PORT, netns=s3_ns,  # noqa: S104 - inside the s3 namespace only
                                                              log_dir=log_path))
                else:
                    env.moto = stack.enter_context(start_moto(log_dir=log_path))
                    env.zones = tuple(Zone(**{**vars(z), "s3_endpoint": env.moto.endpoint_url}) for z in env.zones)
                broker_store = env.moto
                if broker == "tansu":
                    env.bucket = f"{PREFIX}{run_id}-tansu"
                    if brokers_own_s3:
                        broker_store = stack.enter_context(start_moto(log_dir=log_path))  # its own port: its own log file
                    _create_bucket_in(s3_ns, f"http://127.0.0.1:{broker_store.port}", env.bucket)
            if start_brokers and broker == "kafka":
                netns_mode = mode == "netns"
                # Fewer zones than three (a two-zone bench): replication as wide as the racks.
                narrow = {} if len(names) >= 3 else {
                    "default.replication.factor": str(len(names)), "min.insync.replicas": str(min(2, len(names))),
                    "offsets.topic.replication.factor": str(len(names)),
                    "transaction.state.log.replication.factor": str(len(names)),
                    "transaction.state.log.min.isr": str(min(2, len(names)))}
                env.kafka = stack.enter_context(start_kafka_cluster(
                    names, overrides=narrow, hosts=[z.address for z in env.zones] if netns_mode else None,
                    netns=[z.netns for z in env.zones] if netns_mode else None,
                    internal_hosts=[z.replication_address or "" for z in env.zones] if netns_mode else None,
                    log_dir=log_path / "kafka", version=kafka_version or KAFKA_VERSION))
                env.zones = tuple(Zone(**{**vars(z), "broker_bootstrap": env.kafka.node_of_rack(z.name).bootstrap})
                                  for z in env.zones)
            elif start_brokers:
                new_zones = []
                for z in env.zones:
                    if mode == "netns":
                        tansu = stack.enter_context(start_tansu(z.s3_endpoint, env.bucket, host=z.address,
                                                                port=BROKER_PORT, netns=z.netns, log_dir=log_path))
                    else:
                        tansu = stack.enter_context(start_tansu(broker_store.endpoint_url, env.bucket, log_dir=log_path))
                    env.brokers[z.name] = tansu
                    new_zones.append(Zone(**{**vars(z), "broker_bootstrap": tansu.bootstrap}))
                env.zones = tuple(new_zones)
            # Registered last so it runs first: producers and sidecars stop before the brokers.
            stack.callback(env._stop_processes)
            log.info("zones up: mode=%s run=%s zones=%s logs=%s", mode, run_id,
                     ", ".join(f"{z.name}={z.address}" for z in env.zones), log_path)
            yield env
    except BaseException:
        if own_logs:
            log.warning("zone environment ended with an error; its logs are kept in %s", log_path)
        raise
    if own_logs:
        shutil.rmtree(log_path, ignore_errors=True)
