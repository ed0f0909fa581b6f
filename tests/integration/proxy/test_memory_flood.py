"""Proxy memory under a flood of hostile connections, measured on a real proxy process.

A client that sends a 20-byte header announcing a 16 MiB frame used to make the proxy
allocate the whole frame at once (30 such connections: +480 MiB, kept after they closed).
Now a frame's buffer grows with the bytes received, the bytes held for requests still
arriving are capped process-wide (proxy.max_receive_buffer_bytes, then reads wait), and
what the flood made the proxy hold goes back when it closes. RSS is the proxy process's
VmRSS (/proc/<pid>/status); progress is read from its /metrics, never waited for by sleeping.
"""

from __future__ import annotations

import socket
import struct
import time

import pytest

from deploy.local.processes import free_port
from tests import metrics_scrape
from tests.integration.proxy.conftest import start_proxy
from tests.system.reliability.harness import rss_kib

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

MiB = 1024 * 1024
ANNOUNCED = 16 * MiB - 4  # the largest frame the proxy receives into a buffer of its own
FLOOD = 30  # connections, as in the report that found it
BUDGET = 64 * MiB


def scrape(port: int) -> dict[str, float]:
    values: dict[str, float] = {}
    for s in metrics_scrape.samples(port):  # every sample carries the process's zone and component labels
        values[s.name] = values.get(s.name, 0.0) + s.value
    return values


def wait_for(metrics_port: int, condition, what: str, timeout_s: float = 30.0) -> dict[str, float]:
    deadline = time.monotonic() + timeout_s
    while True:
        values = scrape(metrics_port)
        if condition(values):
            return values
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {values}")
        time.sleep(0.05)  # polling the proxy's own counters, bounded by the deadline


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setblocking(False)
    return sock


def header_announcing(size: int) -> bytes:
    # size, api_key 0 (Produce), api_version 9, correlation_id 1, client_id null, then the body never comes
    return struct.pack(">ihhih", size, 0, 9, 1, -1) + b"\x00" * 6


def test_rss_grows_with_bytes_received_is_capped_and_goes_back(tansu, tmp_path):
    metrics_port = free_port()
    config = tmp_path / "proxy.toml"
    config.write_text(f'[audit]\noutput = "{tmp_path / "audit"}"\n'
                      f"[proxy]\nmetrics_port = {metrics_port}\nmax_frame_bytes = {16 * MiB}\n"
                      f"max_receive_buffer_bytes = {BUDGET}\nrequest_receive_timeout_s = 60.0\n")
    with start_proxy(tansu.bootstrap, tmp_path, config_file=config) as proxy:
        wait_for(metrics_port, lambda m: "azsidecar_proxy_open_connections" in m, "metrics")
        before = rss_kib(proxy.proc.pid)

        # 1. Headers only: each connection announces 16 MiB and sends 20 bytes.
        socks = [connect(proxy.port) for _ in range(FLOOD)]
        for sock in socks:
            sock.sendall(header_announcing(ANNOUNCED))
        held = wait_for(metrics_port, lambda m: m["azsidecar_proxy_receive_buffered_bytes"] >= FLOOD * 20,
                        "the headers to be read")["azsidecar_proxy_receive_buffered_bytes"]
        during_headers = rss_kib(proxy.proc.pid)
        # 20 bytes plus 256 KiB of room each (FRAME_AHEAD_BYTES), not 16 MiB each.
        assert held <= FLOOD * (20 + 256 * 1024), held
        assert during_headers - before < 40 * 1024, (before, during_headers)  # was +480 MiB

        # 2. The same connections now send 8 MiB of their frames each (240 MiB in all): the
        # proxy keeps at most the budget (plus one 256 KiB read per connection, and one frame on
        # the overdraft that guarantees progress) and stops reading.
        payload = b"\x00" * (1 * MiB)
        offered = [0] * FLOOD
        deadline = time.monotonic() + 60
        while sum(offered) < FLOOD * 8 * MiB and time.monotonic() < deadline:
            progressed = False
            for i, sock in enumerate(socks):
                if offered[i] >= 8 * MiB:
                    continue
                try:
                    offered[i] += sock.send(payload[: 8 * MiB - offered[i]])
                    progressed = True
                except BlockingIOError:
                    pass  # this one is held back: the proxy stopped reading it
            if not progressed:
                values = scrape(metrics_port)
                if values["azsidecar_proxy_receive_budget_waits_total"] > 0:
                    break  # everyone is held back and the proxy says it waits for room
                time.sleep(0.05)  # the proxy is still reading; try the sockets again
        values = wait_for(metrics_port, lambda m: m["azsidecar_proxy_receive_budget_waits_total"] > 0,
                          "backpressure")
        during_bytes = rss_kib(proxy.proc.pid)
        bound = BUDGET + FLOOD * 256 * 1024 + 16 * MiB
        assert values["azsidecar_proxy_receive_buffered_bytes"] <= bound
        assert sum(offered) < FLOOD * 8 * MiB  # kernel buffers took some, the rest was refused by backpressure
        assert during_bytes - before < bound // 1024 + 32 * 1024, (before, during_bytes)  # + the interpreter's own

        # 3. The flood closes: the proxy lets go of what it held, and the memory goes back.
        for sock in socks:
            sock.close()
        wait_for(metrics_port, lambda m: m["azsidecar_proxy_open_connections"] == 0
                 and m["azsidecar_proxy_receive_buffered_bytes"] == 0, "the flood's connections to close",
                 timeout_s=90)
        wait_for(metrics_port, lambda m: m["azsidecar_proxy_memory_trims_total"] >= 1,
                 "the proxy to return the burst's memory (a second after it is over)")
        after = rss_kib(proxy.proc.pid)
        print(f"proxy RSS KiB: before {before}, headers-only flood {during_headers}, "
              f"8 MiB each {during_bytes}, after close {after}")
        assert after - before < 24 * 1024, (before, during_bytes, after)
