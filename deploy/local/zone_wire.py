"""A user-space wire on one zone's inter-zone link: delay, loss, stalls and resets for every
packet the zone exchanges with the other zones (the kernel here has no netem).

In the network-namespace environment (deploy/local/zones.py) a zone reaches the others
through one veth whose root end is a port of the inter-zone bridge. Wiring the zone takes
that port off the bridge and puts a TAP device on the bridge in its place; this process
copies Ethernet frames between the two (an AF_PACKET socket on the veth port, the TAP's
file descriptor), each after the delay the link has at that moment. Everything crossing
zones goes through it: direct produce to another zone's broker, notifications to its
agents, metadata. The zone's S3 link and Kafka's replication link are untouched. The
bridge port's byte counters (the cross-zone meter) still count what the zone sends and
receives. On exit the port goes back on the bridge.

While degraded (from the start, or from SIGUSR1 with `--start-healthy`; SIGUSR2 restores):
- every frame waits `--latency-ms` plus a uniform `--jitter-ms`, in order per direction;
- a frame is dropped with probability `--loss` (TCP retransmits it);
- every `--stall-every-s` the link holds all frames for `--stall-s` (a gray path: nothing
  fails, everything waits), then lets them through in order;
- every `--reset-every-s` the zone's TCP connections to the other zones are destroyed
  (`ss -K` in the zone's namespace: the local end fails at once, the remote end gets an RST).

Counts (frames passed and dropped per direction, stalls, resets, and `degraded` 1 or 0 as
the link is now) go to `--stats` (JSON) once a second, at once when the state changes, and
at exit. Prints `wired=PORT` once the frames flow through it.

Run (as root): `python -m deploy.local.zone_wire --port azsc123-b1 --netns azsc123-use1-az2
--peers 10.213.0.0/24 --latency-ms 40 --jitter-ms 10 --loss 0.02 --stats wire.json`.
`wired_zone(env, zone, ...)` does that for a test and gives `degrade()` / `restore()`.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from deploy.local.processes import stop_process

TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4  # what the packet socket sees of its own sends: not to be copied back
FRAME_MAX = 65_536
READS_PER_TURN = 256  # frames read from one side before the other side gets its turn
START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class LinkShape:
    latency_s: float = 0.0
    jitter_s: float = 0.0
    loss: float = 0.0
    stall_every_s: float = 0.0  # 0: no stalls
    stall_s: float = 0.0
    reset_every_s: float = 0.0  # 0: no resets

    def __post_init__(self) -> None:
        if min(self.latency_s, self.jitter_s, self.stall_every_s, self.stall_s, self.reset_every_s) < 0:
            raise ValueError("latency, jitter, stall and reset times must be >= 0")
        if not 0 <= self.loss < 1:
            raise ValueError("loss: a probability in [0, 1)")
        if self.stall_every_s and self.stall_s >= self.stall_every_s:
            raise ValueError("stall_s must be shorter than stall_every_s")


class WireSchedule:
    """When each frame leaves the wire (pure: the clock and the random draws come in).

    A frame that arrives at `now` in `direction` is dropped (None) or leaves at
    max(now + delay, the previous frame's departure in that direction): jitter never
    reorders a direction. A stall holds every frame until it ends."""

    def __init__(self, shape: LinkShape, rng: random.Random, degraded_since: float | None) -> None:
        self.shape, self.rng = shape, rng
        self.degraded_since = degraded_since  # None: healthy, frames pass at once
        self._last: dict[str, float] = {}

    def degrade(self, now: float) -> None:
        if self.degraded_since is None:
            self.degraded_since = now

    def restore(self) -> None:
        self.degraded_since = None

    def stall_end(self, now: float) -> float | None:
        """The end of the stall `now` is in, if any."""
        s = self.shape
        if self.degraded_since is None or not s.stall_every_s:
            return None
        into = (now - self.degraded_since) % s.stall_every_s
        start = s.stall_every_s - s.stall_s  # each period: flowing, then stalled at its end
        return now + (s.stall_every_s - into) if into >= start else None

    def departure(self, direction: str, now: float) -> float | None:
        s = self.shape
        if self.degraded_since is None:
            due = now
        else:
            if s.loss and self.rng.random() < s.loss:
                return None
            due = now + s.latency_s + (self.rng.uniform(0, s.jitter_s) if s.jitter_s else 0.0)
            stall = self.stall_end(now)
            if stall is not None:
                due = max(due, stall)
        due = max(due, self._last.get(direction, 0.0))
        self._last[direction] = due
        return due


def _ip(*args: str) -> str:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=10).stdout


def _master(port: str) -> str | None:
    info = json.loads(_ip("-j", "link", "show", port))[0]
    master = info.get("master")
    return str(master) if master else None


def _open_tap(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
    return fd


def reset_connections(netns: str | None, peers: str) -> None:
    """Destroy the namespace's TCP connections to `peers` (a prefix): RSTs both ways."""
    prefix = ["ip", "netns", "exec", netns] if netns else []
    subprocess.run([*prefix, "ss", "-K", "dst", peers], capture_output=True, timeout=10, check=False)


class Wire:
    """The I/O shell: frames between the veth port and the TAP, on the schedule's times."""

    def __init__(self, port: str, netns: str | None, peers: str, schedule: WireSchedule, stats: Path | None) -> None:
        self.port, self.netns, self.peers, self.schedule, self.stats = port, netns, peers, schedule, stats
        self.counts: Counter[str] = Counter()
        bridge = _master(port)
        if bridge is None:
            raise RuntimeError(f"{port} is on no bridge")
        self.bridge: str = bridge
        self.tap_name = f"{port[-14:]}w"  # interface names hold 15 characters; the port's end is unique
        mtu = str(json.loads(_ip("-j", "link", "show", port))[0]["mtu"])
        self.tap = _open_tap(self.tap_name)
        _ip("link", "set", self.tap_name, "mtu", mtu)
        # no IPv6 on it: its router solicitations would be bytes no zone sent
        subprocess.run(["sysctl", "-qw", f"net.ipv6.conf.{self.tap_name}.disable_ipv6=1"], capture_output=True,
                       timeout=10, check=False)
        # Opened for no protocol, then bound to the port for all: a socket opened for ETH_P_ALL
        # hears every interface of the host until its bind, frames this wire must not copy.
        self.raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        self.raw.bind((port, ETH_P_ALL))  # Python's address takes host order
        self.raw.setblocking(False)
        # The zone's frames must be wire frames: the wire copies bytes, so a frame left to a
        # checksum offload would arrive with a wrong checksum, and a 64 KB segmentation-offload
        # frame would be dropped by the bridge as longer than the MTU.
        if netns:
            subprocess.run(["ip", "netns", "exec", netns, "ethtool", "-K", "xzone", "tx", "off", "tso", "off",
                            "gso", "off", "gro", "off"], capture_output=True, timeout=10, check=False)
        subprocess.run(["ethtool", "-K", port, "gro", "off"], capture_output=True, timeout=10, check=False)
        _ip("link", "set", port, "nomaster")
        _ip("link", "set", self.tap_name, "master", self.bridge, "up")
        self.queues: dict[str, deque[tuple[float, bytes]]] = {"to_bridge": deque(), "to_zone": deque()}
        self.stop = False
        self.next_reset: float | None = None

    def close(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            _ip("link", "set", self.port, "master", self.bridge)
        with contextlib.suppress(OSError):
            os.close(self.tap)  # the TAP device goes with its last descriptor
        self.raw.close()
        self.write_stats()

    def write_stats(self) -> None:
        if self.stats is not None:
            tmp = self.stats.with_suffix(".tmp")
            tmp.write_text(json.dumps(dict(self.counts)))
            tmp.replace(self.stats)

    def _take(self, direction: str, frame: bytes, now: float) -> None:
        due = self.schedule.departure(direction, now)
        if due is None:
            self.counts[f"{direction}_dropped"] += 1
        else:
            self.queues[direction].append((due, frame))

    def _read(self, now: float, readable: list[int]) -> None:
        if self.raw.fileno() in readable:
            for _ in range(READS_PER_TURN):
                try:
                    frame, address = self.raw.recvfrom(FRAME_MAX)
                except BlockingIOError:
                    break
                if address[2] != PACKET_OUTGOING:
                    self._take("to_bridge", frame, now)
        if self.tap in readable:
            for _ in range(READS_PER_TURN):
                try:
                    frame = os.read(self.tap, FRAME_MAX)
                except BlockingIOError:
                    break
                self._take("to_zone", frame, now)

    def _send_due(self, now: float) -> None:
        for direction, queue in self.queues.items():
            while queue and queue[0][0] <= now:
                _, frame = queue.popleft()
                try:
                    if direction == "to_bridge":
                        os.write(self.tap, frame)
                    else:
                        self.raw.send(frame)
                    self.counts[f"{direction}_passed"] += 1
                except OSError:  # a full queue or a frame the device refuses: as a lossy wire
                    self.counts[f"{direction}_send_failed"] += 1

    def _resets(self, now: float) -> None:
        every = self.schedule.shape.reset_every_s
        if self.schedule.degraded_since is None or not every:
            self.next_reset = None
            return
        if self.next_reset is None:
            self.next_reset = now + every
        elif now >= self.next_reset:
            reset_connections(self.netns, self.peers)
            self.counts["resets"] += 1
            self.next_reset = now + every

    def run(self) -> None:
        stats_at = time.monotonic() + 1.0
        was_stalled = False
        self.counts["degraded"] = int(self.schedule.degraded_since is not None)
        self.write_stats()
        while not self.stop:
            degraded = int(self.schedule.degraded_since is not None)
            if degraded != self.counts["degraded"]:  # a signal changed it: say so at once
                self.counts["degraded"] = degraded
                self.write_stats()
            now = time.monotonic()
            dues = [q[0][0] for q in self.queues.values() if q]
            timeout = max(0.0, min([*dues, stats_at, now + 0.1]) - now)
            try:
                readable, _, _ = select.select([self.raw.fileno(), self.tap], [], [], timeout)
            except InterruptedError:
                continue
            now = time.monotonic()
            self._read(now, readable)
            self._send_due(now)
            self._resets(now)
            stalled = self.schedule.stall_end(now) is not None
            if stalled and not was_stalled:
                self.counts["stalls"] += 1
            was_stalled = stalled
            if now >= stats_at:
                self.write_stats()
                stats_at = now + 1.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", required=True, help="the zone's veth port on the inter-zone bridge (root end)")
    parser.add_argument("--netns", default=None, help="the zone's namespace (for the checksum setting and resets)")
    parser.add_argument("--peers", default="10.213.0.0/24", help="the other zones' addresses, for resets")
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--jitter-ms", type=float, default=0.0)
    parser.add_argument("--loss", type=float, default=0.0)
    parser.add_argument("--stall-every-s", type=float, default=0.0)
    parser.add_argument("--stall-s", type=float, default=0.0)
    parser.add_argument("--reset-every-s", type=float, default=0.0)
    parser.add_argument("--start-healthy", action="store_true", help="pass frames untouched until SIGUSR1")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--stats", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        shape = LinkShape(args.latency_ms / 1000, args.jitter_ms / 1000, args.loss, args.stall_every_s,
                          args.stall_s, args.reset_every_s)
    except ValueError as exc:
        parser.error(str(exc))
    schedule = WireSchedule(shape, random.Random(args.seed), None if args.start_healthy else time.monotonic())
    wire = Wire(args.port, args.netns, args.peers, schedule, args.stats)

    def on_signal(signum: int, _frame: object) -> None:
        if signum == signal.SIGUSR1:
            schedule.degrade(time.monotonic())
        elif signum == signal.SIGUSR2:
            schedule.restore()
        else:
            wire.stop = True

    for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    try:
        print(f"wired={args.port}", flush=True)
        wire.run()
    finally:
        wire.close()
    return 0


class WiredZone:
    """A running wire (see `wired_zone`): degrade and restore it, read its counts."""

    def __init__(self, proc: subprocess.Popen[bytes], stats: Path) -> None:
        self.proc, self.stats = proc, stats

    def degrade(self) -> None:
        self.proc.send_signal(signal.SIGUSR1)

    def restore(self) -> None:
        self.proc.send_signal(signal.SIGUSR2)

    def counts(self) -> dict[str, int]:
        try:
            return dict(json.loads(self.stats.read_text()))
        except (OSError, ValueError):
            return {}


@contextlib.contextmanager
def wired_zone(port: str, netns: str | None, log_dir: Path, shape: LinkShape, *, start_healthy: bool = True,
               seed: int | None = None, peers: str = "10.213.0.0/24") -> Iterator[WiredZone]:
    """Run a wire on the zone's bridge port (root); stop it (the port back on the bridge) on
    exit. Raises RuntimeError if it does not start within START_TIMEOUT_S."""
    stats = log_dir / f"wire-{port}.json"
    bridge = _master(port)
    argv = [sys.executable, "-m", "deploy.local.zone_wire", "--port", port, "--peers", peers,
            "--latency-ms", str(shape.latency_s * 1000), "--jitter-ms", str(shape.jitter_s * 1000),
            "--loss", str(shape.loss), "--stall-every-s", str(shape.stall_every_s), "--stall-s", str(shape.stall_s),
            "--reset-every-s", str(shape.reset_every_s), "--stats", str(stats),
            *(["--netns", netns] if netns else []), *(["--start-healthy"] if start_healthy else []),
            *(["--seed", str(seed)] if seed is not None else [])]
    with open(log_dir / f"wire-{port}.log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
        line = proc.stdout.readline() if ready else b""
        if not line.startswith(b"wired="):
            raise RuntimeError(f"the wire on {port} did not start (see {log_dir / f'wire-{port}.log'})")
        yield WiredZone(proc, stats)
    finally:
        stop_process(proc, timeout_s=10)
        with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired, IndexError, ValueError):
            # the wire puts the port back itself; after a kill, this does
            if bridge is not None and _master(port) is None:
                _ip("link", "set", port, "master", bridge)


if __name__ == "__main__":
    sys.exit(main())
