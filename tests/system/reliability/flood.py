"""A flood of hostile connections against one proxy process, with its RSS before, during, after.

Three kinds at once, as an attacker on the proxy's host would send them:
- `big`: a Produce header announcing a 16 MiB frame, then `big_bytes` of it, then silence
  (memory: the proxy holds what arrived, within proxy.max_receive_buffer_bytes);
- `slow`: the first 3 bytes of a request, then silence (slowloris);
- `idle`: connect and send nothing (beyond proxy.max_connections they are refused at once).
The flood is held `hold_s` seconds while the proxy's VmRSS is sampled, then every socket is
closed; once the proxy has let go of them and returned the burst's memory (its log says so,
`trims_logged`), the RSS after is sampled (all waits bounded). Used by tests/system/reliability and by
bench/campaign.py's `flood` scenario.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.system.reliability.harness import rss_kib

MiB = 1024 * 1024
ANNOUNCED = 16 * MiB - 4  # the largest frame the proxy receives into a buffer of its own
SAMPLE_S = 0.1  # RSS sampling period while the flood is held
AFTER_S = 2.0  # RSS "after" is the last of its samples over this long, once the flood's sockets are gone
ACCEPT_WAIT_S = 30.0  # after the hold: how long the proxy may take to accept or refuse every connection
SETTLE_S = 30.0  # after closing: how long the proxy may take to let go of the flood's connections and trim
TRIMMED = "free memory returned to the OS"  # the proxy's log line after a burst's trim (proxy/server.py)


@dataclass(frozen=True)
class FloodResult:
    rss_before_kib: int
    rss_peak_kib: int  # the largest sample while the flood was held
    rss_after_kib: int  # once it settled after the flood closed
    opened: int  # connections the kernel accepted
    refused: int  # of those, closed by the proxy before the hold ended (limits, deadlines)
    big_bytes_sent: int  # what the `big` connections got into the kernel's buffers and the proxy
    trimmed: bool | None = None  # the proxy logged a trim after the flood (None: not watched)

    def as_dict(self) -> dict:
        return {"rss_before_mib": round(self.rss_before_kib / 1024, 1),
                "rss_peak_mib": round(self.rss_peak_kib / 1024, 1),
                "rss_after_mib": round(self.rss_after_kib / 1024, 1), "opened": self.opened,
                "closed_by_proxy": self.refused, "big_mib_sent": round(self.big_bytes_sent / MiB, 1),
                "trimmed": self.trimmed}


def _header(size: int) -> bytes:
    # size, api_key 0 (Produce), api_version 9, correlation_id 1, client_id null, then 6 bytes of body
    return struct.pack(">ihhih", size, 0, 9, 1, -1) + b"\x00" * 6


def _closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True  # reset


def trims_logged(log_path: Path) -> Callable[[], int]:
    """How many times the proxy logging to `log_path` has returned a burst's memory so far."""
    def count() -> int:
        try:
            return log_path.read_text(errors="replace").count(TRIMMED)
        except OSError:
            return 0
    return count


def flood(host: str, port: int, pid: int, *, big: int = 30, big_bytes: int = 8 * MiB, slow: int = 70,
          idle: int = 1000, hold_s: float = 5.0, trims: Callable[[], int] | None = None) -> FloodResult:
    """Flood the proxy at host:port (process `pid`) and measure it; `trims` (trims_logged) lets
    the RSS after wait for the proxy's trim. Raises OSError if it cannot connect at all."""
    before = rss_kib(pid) or 0
    trims_before = trims() if trims is not None else 0
    fds_before = open_fds(pid)
    socks: list[tuple[str, socket.socket]] = []
    try:
        for kind, n in (("big", big), ("slow", slow), ("idle", idle)):
            for _ in range(n):
                try:
                    sock = socket.create_connection((host, port), timeout=5)
                except OSError:
                    continue  # the backlog is full: counted as not opened
                sock.setblocking(False)
                socks.append((kind, sock))
        payload = b"\x00" * MiB
        sent = {id(s): 0 for kind, s in socks if kind == "big"}
        for kind, sock in socks:
            with contextlib.suppress(OSError):
                if kind == "big":
                    sock.send(_header(ANNOUNCED))
                elif kind == "slow":
                    sock.send(_header(ANNOUNCED)[:3])
        peak = before
        ends = time.monotonic() + hold_s
        while time.monotonic() < ends:
            for kind, sock in socks:
                if kind != "big" or sent[id(sock)] >= big_bytes:
                    continue
                with contextlib.suppress(OSError):  # BlockingIOError: the proxy stopped reading it
                    sent[id(sock)] += sock.send(payload[: big_bytes - sent[id(sock)]])
            peak = max(peak, rss_kib(pid) or 0)
            time.sleep(SAMPLE_S)  # the sampling period of the measurement
        # A proxy short of CPU accepts slowly: the kernel completed every handshake, but the
        # proxy may not have taken them all off its backlog yet. Wait (bounded) until every
        # connection is either held by the proxy (its descriptors) or closed by it (refused),
        # so the refusals are counted once it has seen the whole flood.
        accept_until = time.monotonic() + ACCEPT_WAIT_S
        while True:
            refused = sum(1 for _kind, sock in socks if _closed_by_peer(sock))
            held = open_fds(pid) - fds_before
            if refused + held >= len(socks) or time.monotonic() >= accept_until:
                break
            peak = max(peak, rss_kib(pid) or 0)
            time.sleep(SAMPLE_S)  # polling the proxy's descriptors and the sockets, bounded by ACCEPT_WAIT_S
    finally:
        for _kind, sock in socks:
            sock.close()
    # The proxy has let go of the flood once its descriptors are back to what they were (it
    # may first drain what the kernel still held for it) and it has returned the burst's free
    # memory to the OS (a second after, at least 10 s after its previous trim); its RSS is
    # then read over AFTER_S.
    settle_until = time.monotonic() + SETTLE_S
    while open_fds(pid) > fds_before and time.monotonic() < settle_until:
        time.sleep(0.1)  # polling the proxy's descriptor count, bounded by SETTLE_S
    while trims is not None and trims() <= trims_before and time.monotonic() < settle_until:
        time.sleep(0.1)  # polling the proxy's log for its trim, bounded by SETTLE_S
    trimmed = None if trims is None else trims() > trims_before
    after = rss_kib(pid) or 0
    for _ in range(int(AFTER_S / SAMPLE_S)):
        time.sleep(SAMPLE_S)  # the sampling period of the measurement
        after = rss_kib(pid) or after
    return FloodResult(before, peak, after, len(socks), refused, sum(sent.values()), trimmed)


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0
