"""deploy/local/zone_wire.py on real network namespaces: a TCP echo across two zones, with the
first zone's inter-zone link through the wire, healthy, degraded and restored.

The zones come from deploy/local/zones.py (netns mode, no S3, no brokers): zone 0 is wired,
an echo server listens in zone 1, and a client in zone 0 measures round trips. Only lower
bounds on time are asserted (a delay the wire adds cannot be hidden by a slow host).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from deploy.local.zone_wire import LinkShape, wired_zone
from deploy.local.zones import netns_available, three_zones

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180),
              pytest.mark.skipif(not netns_available(), reason="netns mode needs root and iproute2")]

ECHO_PORT = 7007
ECHO = """
import socket, sys, threading
server = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("listening", flush=True)
def serve(conn):
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)
while True:
    threading.Thread(target=serve, args=(server.accept()[0],), daemon=True).start()
"""
# Round trips of 100 bytes (or, with "idle", one connection waiting up to 15 s for the wire's
# reset): prints {"rtts_ms": [...]} or {"error": "..."}.
CLIENT = """
import json, socket, sys, time
host, port, mode, count = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
try:
    with socket.create_connection((host, port), timeout=15) as conn:
        if mode == "idle":
            conn.recv(1)
            print(json.dumps({"error": "closed"}))
            raise SystemExit
        rtts = []
        for _ in range(count):
            started = time.monotonic()
            conn.sendall(b"x" * 100)
            got = b""
            while len(got) < 100:
                got += conn.recv(100 - len(got))
            rtts.append((time.monotonic() - started) * 1000)
        print(json.dumps({"rtts_ms": rtts}))
except OSError as exc:
    print(json.dumps({"error": type(exc).__name__}))
"""


@pytest.fixture(scope="module")
def zones(tmp_path_factory):
    with three_zones(("za", "zb"), mode="netns", start_s3=False, start_brokers=False,
                     log_dir=tmp_path_factory.mktemp("wire-zones")) as env:
        server = env.run_in_zone(env.zones[1], [sys.executable, "-c", ECHO, env.zones[1].address, str(ECHO_PORT)],
                                 log_name="echo")
        deadline = time.monotonic() + 30
        while "listening" not in server.log_path.read_text():
            assert server.poll() is None and time.monotonic() < deadline, server.log_path.read_text()
            time.sleep(0.05)  # polling the server's log for its ready line, bounded
        yield env


def client(env, mode: str = "echo", count: int = 5) -> dict:
    argv = ["ip", "netns", "exec", env.zones[0].netns, sys.executable, "-c", CLIENT, env.zones[1].address,
            str(ECHO_PORT), mode, str(count)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return json.loads(done.stdout.strip().splitlines()[-1])


def until_counts(wire, ok, what: str) -> dict:
    deadline = time.monotonic() + 10
    while not ok(counts := wire.counts()):
        assert time.monotonic() < deadline, f"{what}: {counts}"
        time.sleep(0.05)  # polling the wire's stats file, bounded
    return counts


def master_of(port: str) -> str | None:
    out = subprocess.run(["ip", "-j", "link", "show", port], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)[0].get("master")


def test_delay_while_degraded_then_frames_pass_again(zones):
    zone = zones.zones[0]
    bridge = master_of(zone.bridge_port)
    with wired_zone(zone.bridge_port, zone.netns, zones.log_dir, LinkShape(latency_s=0.050)) as wire:
        assert master_of(zone.bridge_port) is None  # the TAP stands in for the port
        healthy = client(zones)
        assert len(healthy["rtts_ms"]) == 5, healthy
        wire.degrade()
        until_counts(wire, lambda c: c.get("degraded") == 1, "degraded")
        degraded = client(zones)
        # each round trip crosses the wire twice: 50 ms out, 50 ms back
        assert min(degraded["rtts_ms"]) >= 100, degraded
        wire.restore()
        until_counts(wire, lambda c: c.get("degraded") == 0, "restored")
        again = client(zones)
        assert len(again["rtts_ms"]) == 5, again
        counts = until_counts(wire, lambda c: c.get("to_bridge_passed", 0) > 0, "frames counted")
    print(f"round trips, ms: healthy {healthy['rtts_ms']}, degraded {degraded['rtts_ms']}, "
          f"restored {again['rtts_ms']}; wire {counts}")
    assert counts.get("to_zone_passed", 0) > 0
    assert master_of(zone.bridge_port) == bridge  # back on the bridge


def test_loss_and_stalls_cost_time_not_bytes(zones):
    zone = zones.zones[0]
    shape = LinkShape(loss=0.2, stall_every_s=1.0, stall_s=0.4)
    with wired_zone(zone.bridge_port, zone.netns, zones.log_dir, shape, start_healthy=False, seed=3) as wire:
        answer = client(zones, count=20)
        counts = until_counts(wire, lambda c: c.get("stalls", 0) >= 1, "a stall")
    assert len(answer["rtts_ms"]) == 20, answer  # every echo came back whole (TCP resent what was lost)
    assert counts.get("to_bridge_dropped", 0) + counts.get("to_zone_dropped", 0) > 0, counts


def test_resets_break_the_zones_connections(zones):
    zone = zones.zones[0]
    with wired_zone(zone.bridge_port, zone.netns, zones.log_dir, LinkShape(reset_every_s=1.0),
                    start_healthy=False) as wire:
        answer = client(zones, mode="idle")
        until_counts(wire, lambda c: c.get("resets", 0) >= 1, "a reset counted")  # stats are written each second
    assert answer["error"] in ("ConnectionAbortedError", "ConnectionResetError"), answer
