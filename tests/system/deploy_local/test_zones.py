"""The three-zone environment: namespaces come and go, the bridge meter counts what crosses.

Needs root (network namespaces); skipped otherwise. Every test builds its own
environment with a unique run id, so parallel runs of these tests do not collide.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from deploy.local.scenario import TopicSpec, Workload, run_baseline
from deploy.local.zones import PREFIX, cleanup_leftovers, three_zones

# Bytes, records and bounded waits only, and an environment of its own: runs beside the
# system tier's chain at the integration tier's priority (tests/conftest.py).
BESIDE_THE_SYSTEM_TIER = True

pytestmark = [
    pytest.mark.integration,
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: creates network namespaces, veths and a bridge"),
]

PAYLOAD_BYTES = 1_000_000
# Per-packet bytes the veth counters add on top of TCP payload, by hand:
# Ethernet 14 + IPv4 20 + TCP 20 + options <= 20 (the SYN: MSS 4, SACK-permitted 2,
# timestamps 10, window scale 3, NOP 1) = 74. Data and ACK segments carry only the
# timestamps option (12 with padding): 66. ARP is 42, RST 54. So every counted packet
# adds at most 74 bytes, with or without segmentation offload.
MAX_HEADER_BYTES_PER_PACKET = 74
# Payload of one retransmission at most: a GSO segment with offloads on, one MSS with them off.
RESENT_BYTES = {False: 65_483, True: 1448}

RECEIVER = textwrap.dedent("""
    import socket, sys
    srv = socket.create_server((sys.argv[1], int(sys.argv[2])))
    conn, _ = srv.accept()
    total = 0
    while chunk := conn.recv(65536):
        total += len(chunk)
    conn.close()
    print(total)
""")
SENDER = textwrap.dedent("""
    import socket, sys, time
    deadline = time.monotonic() + 10
    while True:
        try:
            s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)  # the receiver is still starting: retry the connect
    s.sendall(b"x" * int(sys.argv[3]))
    s.shutdown(socket.SHUT_WR)
    s.recv(1)  # EOF once the receiver has read everything and closed
    # tcp_info's tcpi_total_retrans (u32 at byte 100): segments this socket sent again
    info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    print(int.from_bytes(info[100:104], "little"))
    s.close()
""")


GET_LENGTH = textwrap.dedent("""
    import boto3, sys
    s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    print(len(s3.get_object(Bucket=sys.argv[2], Key=sys.argv[3])["Body"].read()))
""")


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _links() -> set[str]:
    out = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True, check=True).stdout
    return {link["ifname"] for link in json.loads(out)}


def _owned(run_id: str) -> set[str]:
    mark = f"{PREFIX}{run_id}-"
    return {n for n in _namespaces() | _links() if n.startswith(mark)}


def test_everything_is_removed_after_an_exception_in_the_block():
    class Boom(Exception):
        pass

    seen = {}
    with pytest.raises(Boom), three_zones(start_s3=False, start_brokers=False) as env:
        seen["run_id"] = env.run_id
        seen["log_dir"] = env.log_dir
        # 4 namespaces (3 zones + s3) and 4 root links (bridge + 3 ports) exist now.
        assert len(_owned(env.run_id)) == 8
        assert {z.address for z in env.zones} == {"10.213.0.1", "10.213.0.2", "10.213.0.3"}
        seen["proc"] = env.run_in_zone(env.zones[0], [sys.executable, "-c", "import time; time.sleep(300)"])
        raise Boom
    assert seen["proc"].poll() is not None  # the sleeper was stopped
    assert _owned(seen["run_id"]) == set()
    assert any(seen["log_dir"].iterdir()), "the logs of a failed run are kept for a look"
    shutil.rmtree(seen["log_dir"])


def test_a_clean_run_removes_its_temporary_log_directory():
    with three_zones(start_s3=False, start_brokers=False) as env:
        log_dir = env.log_dir
        env.run_in_zone(env.zones[0], [sys.executable, "-c", "print('hello')"]).wait(timeout=30)
        assert any(log_dir.iterdir())
    assert not log_dir.exists()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_tears_everything_down(signum, tmp_path):
    # A shell that starts a job in the background sets SIGINT to "ignore", and Python keeps
    # that: the child asks for Python's Ctrl-C behaviour itself, as an interactive run has it.
    script = textwrap.dedent("""
        import signal
        import sys
        from deploy.local.zones import three_zones
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with three_zones(start_s3=False, start_brokers=False, log_dir=sys.argv[1]) as env:
            print(env.run_id, flush=True)
            sys.stdin.read()  # block until the test signals us
    """)
    child = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        run_id = child.stdout.readline().strip()
        assert run_id, child.stderr.read()
        assert len(_owned(run_id)) == 8
        child.send_signal(signum)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
    assert child.returncode != 0
    assert _owned(run_id) == set()


def test_cleanup_leftovers_removes_a_crashed_run_but_not_a_live_one(tmp_path):
    crash = textwrap.dedent("""
        import os
        import sys
        from deploy.local.zones import three_zones
        with three_zones(start_s3=False, start_brokers=False, log_dir=sys.argv[1]) as env:
            print(env.run_id, flush=True)
            os._exit(3)  # die without any teardown, like a SIGKILL
    """)
    done = subprocess.run([sys.executable, "-c", crash, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    dead_run = done.stdout.strip()
    assert dead_run, done.stderr
    assert len(_owned(dead_run)) == 8
    with three_zones(start_s3=False, start_brokers=False, cleanup_first=False) as env:
        removed = cleanup_leftovers()
        assert f"netns {PREFIX}{dead_run}-use1-az1" in removed
        assert f"link {PREFIX}{dead_run}-br" in removed
        assert _owned(dead_run) == set()
        assert len(_owned(env.run_id)) == 8  # ours is alive: untouched


@pytest.mark.parametrize("segment_per_packet", [False, True])
def test_meter_counts_a_known_transfer_between_two_zones(segment_per_packet):
    with three_zones(start_s3=False, start_brokers=False, segment_per_packet=segment_per_packet) as env:
        z1, z2, z3 = env.zones
        receiver = env.run_in_zone(z2, [sys.executable, "-c", RECEIVER, z2.address, "7000"], log_name="rx")
        meter = env.meter()
        meter.start()
        code = env.run_to_completion(z1, [sys.executable, "-c", SENDER, z2.address, "7000", str(PAYLOAD_BYTES)],
                                     timeout_s=30, log_name="tx")
        assert receiver.wait(timeout=30) == 0
        reading = meter.stop()
        assert code == 0
        # Segments lost and sent again cross the meter twice: their payload is allowed for.
        retransmitted = int((env.log_dir / "tx.log").read_text().strip().splitlines()[-1])
        assert receiver.log_path.read_text().strip() == str(PAYLOAD_BYTES)
    assert reading.metered and reading.status == "metered"
    a, b, c = (reading.per_zone[z.name] for z in (z1, z2, z3))
    # Zone 1 sent the payload plus headers; zone 2 received exactly what zone 1 sent
    # (a bridge port's tx of a unicast frame is the other port's rx).
    resent = retransmitted * RESENT_BYTES[segment_per_packet]
    assert PAYLOAD_BYTES <= a.sent_bytes <= PAYLOAD_BYTES + resent + MAX_HEADER_BYTES_PER_PACKET * a.sent_packets
    assert b.received_bytes == a.sent_bytes
    # Zone 2 sent only ACKs, FIN and its ARP reply: headers, no payload.
    assert 0 < b.sent_bytes <= MAX_HEADER_BYTES_PER_PACKET * b.sent_packets
    assert a.received_bytes == b.sent_bytes
    # Zone 3 only saw the flooded ARP broadcast (42 bytes, at most one per direction).
    assert c.sent_bytes == 0
    assert c.received_bytes <= 2 * 42
    if segment_per_packet:
        # MSS = MTU 1500 - IPv4 20 - TCP 20 - timestamps 12 = 1448: at least
        # ceil(1,000,000 / 1448) = 691 data segments, each with a 66-byte header.
        assert a.sent_packets >= 691
        assert a.sent_bytes >= PAYLOAD_BYTES + 691 * 66
    total = reading.total_bytes
    assert PAYLOAD_BYTES <= total <= PAYLOAD_BYTES + resent + MAX_HEADER_BYTES_PER_PACKET * reading.total_packets


def test_s3_traffic_never_touches_the_bridge():
    put = textwrap.dedent("""
        import http.client, sys, urllib.parse
        e = urllib.parse.urlsplit(sys.argv[1])
        c = http.client.HTTPConnection(e.hostname, e.port, timeout=30)
        c.request("PUT", f"/{sys.argv[2]}/obj", body=b"s" * int(sys.argv[3]))
        sys.exit(0 if c.getresponse().status == 200 else 1)
    """)
    with three_zones(start_brokers=False) as env:
        env.create_bucket("extra")  # from the root namespace, which has no route to moto
        zone = env.zones[1]
        s3_before = env.link_counters_s3(zone)
        meter = env.meter()
        meter.start()
        code = env.run_to_completion(zone, [sys.executable, "-c", put, zone.s3_endpoint, "extra",
                                            str(PAYLOAD_BYTES)], timeout_s=60, log_name="put")
        reading = meter.stop()
        s3_after = env.link_counters_s3(zone)
        get = env.run_beside_s3([sys.executable, "-c", GET_LENGTH, env.s3_local_endpoint, "extra", "obj"],
                                log_name="get")
        assert get.wait(timeout=30) == 0
        stored_bytes = int(get.log_path.read_text().strip())
    assert code == 0
    assert reading.total_bytes == 0
    assert all(z.sent_bytes == z.received_bytes == 0 for z in reading.per_zone.values())
    assert s3_after.sent_bytes - s3_before.sent_bytes >= PAYLOAD_BYTES
    assert stored_bytes == PAYLOAD_BYTES


def test_baseline_run_is_exactly_once_and_metered():
    # Per producer (one per zone): 3,006,000 // 3 // 1000 = 1002 records, alternating
    # topics, so 501 to "u" (unkeyed, round-robin: 167 per partition) and 501 to "k"
    # (keyed with key_space=1: every key is "key-0", crc32 % 3 == 0, so all to partition 0).
    # Cross-zone payload, by hand:
    #   u: each producer sends 2 of 3 partitions elsewhere: 3 * 334 * 1000 B = 1,002,000
    #   k: partition 0 leads in use1-az1, so zones 2 and 3 send theirs across:
    #      2 * 501 * (1000 value + 5 key) B = 1,007,010
    # total 2,009,010 B.
    workload = Workload(total_bytes=3_006_000, record_bytes=1000, key_space=1, linger_ms=5,
                        topics=(TopicSpec("u", 3, keyed=False), TopicSpec("k", 3, keyed=True)), timeout_s=120)
    with three_zones() as env:
        result = run_baseline(env, workload)
    assert result.verification["problems"] == []
    assert result.ok
    assert result.records == 3006
    assert result.verification["records"] == 3006
    assert result.payload_bytes == 3 * (501 * 1000 + 501 * 1005)
    assert result.cross_zone_payload_bytes == 2_009_010
    # Upper bound on what Kafka and TCP add: record framing <= 14 B per 1000-B record
    # (1.4%), TCP/IP headers 66 B per >= 1448-B segment (4.6%), the leaders' ACKs 66 B
    # per <= 2 segments (2.3%): under 10%; plus a fixed 100 KB for connection set-up,
    # ApiVersions, Metadata and InitProducerId of 6 cross-zone connections.
    assert 2_009_010 <= result.reading.total_bytes <= 2_009_010 * 1.10 + 100_000


# A stand-in for the sidecar that only plumbs run_sidecar: it relays 127.0.0.1:9092 to
# the zone's own broker. Tansu's Metadata then names that broker (same zone) as leader,
# so every byte stays inside the zone.
RELAY = textwrap.dedent("""
    import asyncio, sys

    async def pipe(reader, writer):
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    async def handle(client_reader, client_writer):
        host, port = sys.argv[3].rsplit(":", 1)
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        await asyncio.gather(pipe(client_reader, up_writer), pipe(up_reader, client_writer),
                             return_exceptions=True)

    async def main():
        server = await asyncio.start_server(handle, sys.argv[1], int(sys.argv[2]))
        async with server:
            await server.serve_forever()

    asyncio.run(main())
""")


def test_run_sidecar_plumbing_with_an_in_zone_relay():
    import contextlib

    from deploy.local.processes import STARTUP_TIMEOUT_S, stop_process, wait_for_port
    from deploy.local.scenario import run_sidecar

    entered = []

    @contextlib.contextmanager
    def start_relay(env, zone):
        proc = env.run_in_zone(zone, [sys.executable, "-c", RELAY, zone.sidecar_host, str(zone.sidecar_port),
                                      zone.broker_bootstrap], log_name=f"relay-{zone.name}")
        wait_for_port(zone.sidecar_host, zone.sidecar_port, proc, STARTUP_TIMEOUT_S, "relay", proc.log_path,
                      zone.netns)
        entered.append(zone.name)
        try:
            yield proc
        finally:
            stop_process(proc)

    # 3 producers * (600,000 // 3 // 1000 = 200 records) = 600 records.
    workload = Workload(total_bytes=600_000, record_bytes=1000, linger_ms=5, timeout_s=60,
                        topics=(TopicSpec("u", 3, keyed=False), TopicSpec("k", 3, keyed=True)))
    with three_zones() as env:
        result = run_sidecar(env, workload, start_relay)
    assert entered == ["use1-az1", "use1-az2", "use1-az3"]
    assert result.verification["problems"] == []
    assert result.records == 600
    assert result.reading.total_bytes == 0  # nothing left its zone


@pytest.mark.skipif(shutil.which("ethtool") is None, reason="needs ethtool (make setup installs it)")
def test_offloads_off_turns_segmentation_and_receive_offloads_off_on_both_ends():
    def features(prefix: list[str], dev: str) -> dict[str, str]:
        out = subprocess.run(prefix + ["ethtool", "-k", dev], capture_output=True, text=True, timeout=10,
                             check=True).stdout
        return dict(line.strip().split(": ", 1)[0:2] for line in out.splitlines() if ": " in line)

    with three_zones(start_s3=False, start_brokers=False, offloads=False) as env:
        for zone in env.zones:
            inside = features(["ip", "netns", "exec", zone.netns], "xzone")
            bridge_port = features([], zone.bridge_port)
            for name in ("tcp-segmentation-offload", "generic-segmentation-offload", "generic-receive-offload"):
                assert inside[name].startswith("off"), (zone.name, name, inside[name])
                assert bridge_port[name].startswith("off"), (zone.name, name, bridge_port[name])
    with three_zones(start_s3=False, start_brokers=False) as env:  # the default keeps them on
        assert features([], env.zones[0].bridge_port)["generic-segmentation-offload"].startswith("on")
