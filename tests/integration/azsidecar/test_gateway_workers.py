"""A zone gateway process with `proxy.workers = 2`: one port, two proxies, each with its own id.

Real parts: the `azsidecar proxy` command, Tansu, confluent-kafka and kafka-python over
loopback sockets. Connections spread over both workers (SO_REUSEPORT), Metadata answers
name the advertised host, records arrive exactly once and in order, SIGTERM stops every
worker, and a supervisor killed with -9 leaves no worker behind.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from deploy.local.processes import free_port, stop_process
from tests.conftest import create_topics, unique_name
from tests.integration.proxy.clients_matrix import PARTITIONS

pytestmark = pytest.mark.integration

START_TIMEOUT_S = 90.0  # two spawned interpreters on a shared, loaded 2-core machine
STOP_TIMEOUT_S = 30.0
CONNECTIONS = 16  # all on one worker by chance: 2 x 2^-16


def free_port_pair(avoid: int) -> int:
    """A port p with p + 1 also free (the workers' status ports), neither of them `avoid`."""
    for _ in range(50):
        p = free_port()
        if avoid in (p, p + 1):
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p + 1))
            except OSError:
                continue
        return p
    raise RuntimeError("no two consecutive free ports")


def wait_for_log(path: Path, pattern: str, count: int, proc: subprocess.Popen, timeout_s: float) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while True:
        found = re.findall(pattern, path.read_text(errors="replace"))
        if len(found) >= count:
            return found
        assert proc.poll() is None, f"gateway exited with {proc.returncode}:\n{path.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"{pattern!r} x{count} not logged in {timeout_s}s:\n{path.read_text()[-3000:]}"
        time.sleep(0.1)  # polling a log file for a condition, bounded by the deadline


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:  # a zombie of ours counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def wait_gone(pids: list[int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(gone(p) for p in pids):
        assert time.monotonic() < deadline, f"workers {pids} still running after {timeout_s}s"
        time.sleep(0.1)


def consume(bootstrap: str, topic: str, expected: int, timeout_s: float = 30.0) -> dict[int, list[tuple]]:
    """Every record of `topic` from the broker (confluent-kafka), until `expected` arrived: partition ->
    [(key, value)] in offset order. (kafka-python's end_offsets on Tansu can under-report the end.)"""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("verify"),
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    out: dict[int, list[tuple]] = {}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + timeout_s
        got = 0
        while got < expected:
            assert time.monotonic() < deadline, f"{got} of {expected} records in {timeout_s}s"
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            out.setdefault(msg.partition(), []).append((msg.key(), msg.value()))
            got += 1
        extra = consumer.poll(1.0)  # nothing beyond what was produced
        assert extra is None or extra.error(), f"unexpected extra record {extra.value()!r}"
        return out
    finally:
        consumer.close()


def open_connections(metrics_port: int) -> float:
    body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    match = re.search(r"^azsidecar_proxy_open_connections\{[^}]*\} (\S+)$", body, re.M)
    assert match, body[:2000]
    return float(match.group(1))


def start_gateway(tmp_path: Path, bootstrap: str, workers: int = 2) -> tuple[subprocess.Popen, Path, int, int, list[int]]:
    port = free_port()
    metrics = free_port_pair(avoid=port)
    config = tmp_path / "gateway.toml"
    config.write_text(
        f'zone = "use1-az1"\n[upstream]\nbootstrap_servers = ["{bootstrap}"]\n'
        f'[proxy]\nlisten_host = "127.0.0.1"\nlisten_port = {port}\nproxy_id = "gw-az1"\nworkers = {workers}\n'
        f'advertised_host = "localhost"\nmetrics_port = {metrics}\n'
        f'[audit]\noutput = "{tmp_path / "audit"}"\n'
        f'[authz]\nsource = "none"\n')  # every client with the gateway's rights (this test is about workers, not authorization)
    log = tmp_path / "gateway.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "azsidecar", "proxy", "--config", str(config)],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        started = wait_for_log(log, r"worker (\d) started \(pid (\d+)", workers, proc, START_TIMEOUT_S)
        wait_for_log(log, r"proxy gw-az1-w\d listening", workers, proc, START_TIMEOUT_S)
    except BaseException:
        stop_process(proc)
        raise
    return proc, log, port, metrics, [int(pid) for _, pid in started]


def test_two_workers_share_the_port_and_deliver_in_order(tansu, tmp_path):
    from confluent_kafka import Producer

    topic = unique_name("gw")
    create_topics(tansu.bootstrap, {topic: PARTITIONS})
    proc, log, port, metrics, pids = start_gateway(tmp_path, tansu.bootstrap)
    try:
        text = log.read_text()
        assert "proxy gw-az1-w0 listening" in text and "proxy gw-az1-w1 listening" in text
        socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(CONNECTIONS)]
        try:
            counts = [open_connections(metrics), open_connections(metrics + 1)]
            deadline = time.monotonic() + 10
            while sum(counts) < CONNECTIONS and time.monotonic() < deadline:  # accept is asynchronous
                counts = [open_connections(metrics), open_connections(metrics + 1)]
            assert sum(counts) == CONNECTIONS and min(counts) > 0, counts
        finally:
            for s in socks:
                s.close()

        producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "enable.idempotence": True, "acks": "all",
                             "linger.ms": 5})
        brokers = producer.list_topics(timeout=10).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [("localhost", port)]  # advertised, not bound
        errors: list = []
        for i in range(600):
            producer.produce(topic, key=str(i % 7).encode(), value=f"{i:05d}".encode(),
                             on_delivery=lambda err, _msg: err and errors.append(err))
        assert producer.flush(30) == 0 and not errors
        received = consume(tansu.bootstrap, topic, 600)
        values = [v for records in received.values() for _, v in records]
        assert sorted(values) == [f"{i:05d}".encode() for i in range(600)]  # exactly once
        for records in received.values():  # per key (so per partition) in produce order
            by_key: dict = {}
            for k, v in records:
                by_key.setdefault(k, []).append(v)
            assert all(vs == sorted(vs) for vs in by_key.values())

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STOP_TIMEOUT_S) == 0
        wait_gone(pids, 5)
    finally:
        stop_process(proc)
        for pid in pids:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)


def test_workers_die_with_a_killed_supervisor(tansu, tmp_path):
    proc, _log, _port, _metrics, pids = start_gateway(tmp_path, tansu.bootstrap)
    try:
        proc.kill()
        proc.wait(timeout=5)
        wait_gone(pids, STOP_TIMEOUT_S)  # PR_SET_PDEATHSIG: each drains on the SIGTERM it gets
    finally:
        for pid in pids:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("listen, extra, message", [
    ("10.255.255.1:9094", [], "needs TLS"),
    ("0.0.0.0:9094", [], "proxy.advertised_host: required"),
])
def test_reachable_listener_without_tls_and_sasl_refuses_to_start(listen, extra, message):
    done = subprocess.run([sys.executable, "-m", "azsidecar", "proxy", "--listen", listen, "--zone", "use1-az1",
                           "--bootstrap-servers", "127.0.0.1:9", *extra], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert message in done.stderr, done.stderr
    assert len([line for line in done.stderr.splitlines() if line.strip()]) == 1, done.stderr


def test_a_killed_worker_is_started_again_and_serves(tansu, tmp_path):
    from confluent_kafka import Producer

    topic = unique_name("gw-restart")
    create_topics(tansu.bootstrap, {topic: PARTITIONS})
    proc, log, port, _metrics, pids = start_gateway(tmp_path, tansu.bootstrap)
    try:
        os.kill(pids[1], signal.SIGKILL)
        wait_for_log(log, rf"worker 1 \(pid {pids[1]}\) exited with -9; starting it again", 1, proc, START_TIMEOUT_S)
        restarted = wait_for_log(log, r"worker 1 started \(pid (\d+)", 2, proc, START_TIMEOUT_S)
        new_pid = int(restarted[-1])
        assert new_pid != pids[1]
        wait_for_log(log, r"proxy gw-az1-w1 listening", 2, proc, START_TIMEOUT_S)  # same id: a new epoch fences the old
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "enable.idempotence": True, "acks": "all"})
        for i in range(50):
            producer.produce(topic, value=f"{i:03d}".encode())
        assert producer.flush(30) == 0
        assert sorted(v for records in consume(tansu.bootstrap, topic, 50).values() for _, v in records) == [
            f"{i:03d}".encode() for i in range(50)]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STOP_TIMEOUT_S) == 0
        wait_gone([pids[0], new_pid], 5)
    finally:
        stop_process(proc)


def test_a_worker_that_keeps_failing_at_start_stops_the_gateway(tansu, tmp_path):
    # worker 1's status port is taken: it fails at every start; after three quick failures the
    # supervisor stops worker 0 too and exits 1 (the environment), for the service manager to see
    port = free_port()
    metrics = free_port_pair(avoid=port)
    config = tmp_path / "gateway.toml"
    config.write_text(
        f'zone = "use1-az1"\n[upstream]\nbootstrap_servers = ["{tansu.bootstrap}"]\n'
        f'[proxy]\nlisten_host = "127.0.0.1"\nlisten_port = {port}\nproxy_id = "gw-az1"\nworkers = 2\n'
        f'metrics_port = {metrics}\n[audit]\noutput = "{tmp_path / "audit"}"\n[authz]\nsource = "none"\n')
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", metrics + 1))
        taken.listen(1)
        done = subprocess.run([sys.executable, "-m", "azsidecar", "proxy", "--config", str(config)],
                              capture_output=True, text=True, timeout=START_TIMEOUT_S * 2)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "worker 1 failed 3 times within 10 s of its start" in done.stderr
