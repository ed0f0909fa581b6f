"""Listener limits of the agent (issues 17 and 23): the pure decisions table-tested, then an
agent process under a flood, slow and idle connections (real sockets; RSS read from /proc)."""

from __future__ import annotations

import signal
import socket

import pytest

from deploy.local.processes import free_port
from leader_notify import protocol as p
from leader_notify.agent._limits import ListenerLimits, Refusal, admit, read_deadline
from tests import metrics_scrape
from tests.conftest import create_topics, unique_name
from tests.integration.leader_notify.agent_process import AgentProcess, notify_recording
from tests.integration.leader_notify.helpers import consume, put_object, wal_entry

SMALL = ListenerLimits(max_connections=10, max_connections_per_source=3, max_unauthenticated_connections=5,
                       request_timeout_s=2.0, idle_timeout_s=60.0)


@pytest.mark.parametrize(("total", "from_source", "unauth", "loopback", "expected"), [
    (0, 0, 0, False, None),
    (9, 2, 4, False, None),  # one below every limit
    (10, 0, 0, True, Refusal.MAX_CONNECTIONS),  # the total applies to loopback too
    (5, 3, 0, False, Refusal.MAX_PER_SOURCE),
    (5, 3, 0, True, None),  # loopback: every local proxy is 127.0.0.1
    (5, 0, 5, False, Refusal.MAX_UNAUTHENTICATED),
    (10, 3, 5, False, Refusal.MAX_CONNECTIONS),  # the first limit reached is named
])
def test_admit(total, from_source, unauth, loopback, expected):
    assert admit(SMALL, total=total, from_source=from_source, unauthenticated=unauth, loopback=loopback) is expected


@pytest.mark.parametrize(("established", "frame_started_at", "expected"), [
    (False, None, (102.0, "request_deadline")),  # the HELLO: from accept (100)
    (False, 104.0, (102.0, "request_deadline")),  # a partial HELLO does not buy time
    (True, 103.0, (105.0, "request_deadline")),  # a frame begun: from its first byte
    (True, None, (165.0, "idle")),  # between frames: idle timeout from now (105)
])
def test_read_deadline(established, frame_started_at, expected):
    assert read_deadline(SMALL, now=105.0, accepted_at=100.0, established=established,
                         frame_started_at=frame_started_at) == expected


# ---------------------------------------------------------------- an agent process


def scrape(port: int):
    """value(name, **labels): the sum of the agent's samples of `name` carrying those labels."""
    taken = list(metrics_scrape.samples(port))

    def value(name: str, **labels: str) -> float:
        return sum(s.value for s in taken
                   if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))
    return value


def closed_by_peer(sock: socket.socket) -> bool:
    """Read until the agent closes (True) or the socket's timeout passes (False)."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


@pytest.fixture
def agent(s3_bucket, tansu, tmp_path):
    server, bucket = s3_bucket
    metrics_port = free_port()
    a = AgentProcess(tmp_path, "agent-limits", "az2", endpoint_url=server.endpoint_url, bucket=bucket,
                     bootstrap=tansu.bootstrap,
                     extra={"metrics_port": metrics_port, "request_timeout_s": 1.0, "idle_timeout_s": 2.0})
    a.metrics_port = metrics_port
    try:
        yield a.start(), server.client(), bucket
    finally:
        a.stop(signal.SIGKILL)


@pytest.mark.integration
def test_flood_of_largest_frame_announcements_keeps_memory_bounded(agent, tansu):
    a, s3, bucket = agent
    announce = (p.MAX_FRAME_BYTES - 4).to_bytes(4, "big") + b"\x00" * 1000  # the largest frame, begun
    rss_before = a.rss_kib()
    socks = []
    try:
        for _ in range(1000):
            s = socket.create_connection(("127.0.0.1", a.port), timeout=10)
            s.sendall(announce)
            socks.append(s)
        rss_during = a.rss_kib()
        closed = sum(closed_by_peer(s) for s in socks)
    finally:
        for s in socks:
            s.close()
    rss_after = a.rss_kib()
    m = scrape(a.metrics_port)
    # Every one was refused at accept (64 unauthenticated at most) or closed at its 4-byte prefix.
    assert closed == 1000
    assert (m("azsidecar_agent_connections_refused_total", reason="max_unauthenticated")
            + m("azsidecar_agent_auth_failures_total", reason="bad_frame")) == 1000
    # 1000 x 16 MiB was announced; the agent buffered at most a HELLO's worth of each.
    assert rss_during - rss_before < 20 * 1024, (rss_before, rss_during, rss_after)
    assert rss_after - rss_before < 20 * 1024, (rss_before, rss_during, rss_after)
    print(f"agent RSS KiB before={rss_before} during={rss_during} after={rss_after}")

    # And it still serves a proxy.
    topic = unique_name("flood")
    create_topics(tansu.bootstrap, {topic: 1})
    obj = put_object(s3, bucket, "wal/fl/obj-1", {"az2": [wal_entry(topic, 0, [b"after-flood"])]})
    share = obj.zones["az2"]
    req = p.NotifyRequest(1, "az1", "az2", "proxy-a", 1, bucket, obj.key, share.offset, share.length, tuple(
        p.NotifyEntry(e.topic, e.partition, e.offset, e.length, e.crc32c, e.record_count, e.producer_id,
                      e.producer_epoch, e.base_sequence) for e in share.entries))
    response, _ = notify_recording(a.address, req)
    assert [r.error_code for r in response.results] == [0]
    assert consume(tansu.bootstrap, topic, 0) == [(0, b"after-flood")]


@pytest.mark.integration
def test_silent_slow_and_idle_connections_are_closed_and_counted(agent):
    a, _s3, _bucket = agent
    keyring = p.Keyring([b"test-notify-key-0123456789"])
    silent = socket.create_connection(("127.0.0.1", a.port), timeout=10)  # never sends its HELLO
    slow = socket.create_connection(("127.0.0.1", a.port), timeout=10)
    slow.sendall(p.Channel(keyring, p.Role.PROXY, b"s" * 16).hello()[:10])  # a HELLO begun, never finished
    idle = socket.create_connection(("127.0.0.1", a.port), timeout=10)
    channel = p.Channel(keyring, p.Role.PROXY, b"i" * 16)
    idle.sendall(channel.hello())
    while not channel.established:
        channel.receive_data(idle.recv(65536))
        channel.next_frame()
    try:
        # Each is closed by the agent within its timeout (1 s to arrive, 2 s idle); 10 s bound.
        assert closed_by_peer(silent) and closed_by_peer(slow) and closed_by_peer(idle)
    finally:
        for s in (silent, slow, idle):
            s.close()
    m = scrape(a.metrics_port)
    assert m("azsidecar_agent_connections_timed_out_total", reason="request_deadline") == 2
    assert m("azsidecar_agent_connections_timed_out_total", reason="idle") == 1
    assert m("azsidecar_agent_connections", state="authenticated") == 0
    assert m("azsidecar_agent_connections", state="unauthenticated") == 0
    # Logged once per source per minute: both deadlines hit 127.0.0.1, so one line for them.
    assert a.log_text().count("closed: request_deadline") + a.log_text().count("closed: idle") == 1


@pytest.mark.integration
def test_connections_open_at_shutdown_end_without_a_traceback(agent):
    a, _s3, _bucket = agent
    keyring = p.Keyring([b"test-notify-key-0123456789"])
    socks = []
    try:
        for i in range(3):  # established, idle connections, as a proxy keeps them
            s = socket.create_connection(("127.0.0.1", a.port), timeout=10)
            channel = p.Channel(keyring, p.Role.PROXY, bytes([i]) * 16)
            s.sendall(channel.hello())
            while not channel.established:
                channel.receive_data(s.recv(65536))
                channel.next_frame()
            socks.append(s)
        a.stop(signal.SIGTERM)
        assert a.proc.returncode == 0
    finally:
        for s in socks:
            s.close()
    log = a.log_text()
    assert "shutting down" in log
    assert "Traceback" not in log and "CancelledError" not in log, log[-3000:]


@pytest.mark.integration
def test_a_proxy_resetting_before_its_answer_is_no_error(agent, tansu):
    # A proxy that gives up on a notification (its deadline, a restart) resets the
    # connection while the agent still applies it. The agent applies it to the end and has
    # nowhere to write the answer: that is a closed connection, not an error with a traceback.
    a, s3, bucket = agent
    topic = unique_name("reset")
    create_topics(tansu.bootstrap, {topic: 1})
    requests = []
    for n in range(2):
        obj = put_object(s3, bucket, f"wal/rs/obj-{n}", {"az2": [wal_entry(topic, 0, [f"record-{n}".encode()])]})
        share = obj.zones["az2"]
        requests.append(p.NotifyRequest(n + 1, "az1", "az2", "proxy-r", n + 1, bucket, obj.key, share.offset,
                                        share.length, tuple(p.NotifyEntry(
                                            e.topic, e.partition, e.offset, e.length, e.crc32c, e.record_count,
                                            e.producer_id, e.producer_epoch, e.base_sequence) for e in share.entries)))
    keyring = p.Keyring([b"test-notify-key-0123456789"])
    channel = p.Channel(keyring, p.Role.PROXY, b"r" * 16)
    s = socket.create_connection(("127.0.0.1", a.port), timeout=10)
    try:
        s.sendall(channel.hello())
        while not channel.established:
            channel.receive_data(s.recv(65536))
            channel.next_frame()
        s.sendall(channel.send(p.MessageType.REQUEST, p.encode_request(requests[0])))
    finally:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, (1).to_bytes(4, "little") + (0).to_bytes(4, "little"))
        s.close()  # a reset, at once: the answer has not been written yet
    # The next proxy's notification is answered after the first one's append (one partition,
    # in order): by then the agent has met the reset connection.
    response, _ = notify_recording(a.address, requests[1])
    assert [r.error_code for r in response.results] == [0]
    assert consume(tansu.bootstrap, topic, 0) == [(0, b"record-0"), (1, b"record-1")]
    log = a.log_text()
    assert "Traceback" not in log and "Unhandled exception" not in log, log[-3000:]
