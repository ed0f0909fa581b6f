"""Which loopback ports a process holds TCP connections to, read from /proc (Linux).

The bypass tests use it to see where a client's connections really go: to a proxy
listener, or around the proxy to a broker's own port. A connection counts while it is
established or being set up (SYN_SENT); sampled repeatedly it shows short-lived ones too.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path

LIVE_STATES = {"01", "02"}  # ESTABLISHED, SYN_SENT (include/net/tcp_states.h)
SAMPLE_EVERY_S = 0.02


def socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets process `pid` has open (its fds only; not its children)."""
    out = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir() if fd_dir.is_dir() else ():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed while we looked
        if target.startswith("socket:["):
            out.add(int(target[8:-1]))
    return out


def remote_ports(pid: int) -> set[int]:
    """Remote ports of the live TCP (v4 and v6) connections of process `pid`."""
    inodes = socket_inodes(pid)
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] in LIVE_STATES and int(fields[9]) in inodes:
                    ports.add(int(fields[2].rpartition(":")[2], 16))
    return ports


class PeerSampler:
    """Samples the remote ports of a process in a thread until stopped; `seen` is every
    port it was connected to while sampling (a measuring device, not a synchronisation)."""

    def __init__(self, pid: int, watch: Iterable[int]) -> None:
        self._pid = pid
        self._watch = set(watch)
        self.seen: set[int] = set()
        self.first_seen: dict[int, float] = {}  # port -> time.monotonic() of the first sample that saw it
        self.samples = 0
        self._stop = threading.Event()
        self._sampled = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                now = remote_ports(self._pid) & self._watch
            except FileNotFoundError:
                return  # the process ended
            for port in now - self.seen:
                self.first_seen[port] = time.monotonic()
            self.seen |= now
            with self._sampled:
                self.samples += 1
                self._sampled.notify_all()
            self._stop.wait(SAMPLE_EVERY_S)

    def wait_for_sample(self, timeout_s: float = 5.0) -> None:
        """Return once a sample that started after this call is complete (so `seen` covers
        the connections open now). Raises TimeoutError."""
        with self._sampled:
            target = self.samples + 2
            if not self._sampled.wait_for(lambda: self.samples >= target or not self._thread.is_alive(), timeout_s):
                raise TimeoutError(f"no sample of process {self._pid} within {timeout_s} s")

    def __enter__(self) -> PeerSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
