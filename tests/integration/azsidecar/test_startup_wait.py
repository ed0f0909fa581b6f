"""A proxy or agent started while its zone's brokers are unreachable waits for them (alive, not
ready, the reason in /readyz) and serves once they answer, with no restart: what a zone coming
back from an outage needs (azsidecar/broker_wait.py).

The "brokers" are a relay (deploy/local/notify_faults.py with no faults: it passes Kafka's
length-prefixed frames through) started on the bootstrap address only after the process is
waiting; behind it is Tansu. Until the relay listens, connecting to that address is refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from azsidecar.broker_wait import refusals
from deploy.local.fault_common import running_listener
from deploy.local.processes import DUMMY_CREDENTIALS, STARTUP_TIMEOUT_S, free_port, stop_process, wait_for_port

pytestmark = pytest.mark.integration

KEY = "0123456789abcdef-notify-key"
WAIT_TIMEOUT_S = 20.0  # the readiness answers polled for; the start-up wait retries at most every 5 s


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def poll(url: str, until, what: str) -> tuple[int, dict]:
    """GET url until `until(code, answer)`, within WAIT_TIMEOUT_S; the last answer."""
    deadline = time.monotonic() + WAIT_TIMEOUT_S
    while True:
        code, answer = get(url)
        if until(code, answer):
            return code, answer
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not seen within {WAIT_TIMEOUT_S} s: {code} {answer}")
        time.sleep(0.2)  # polling an HTTP endpoint for a condition, bounded by the deadline


@contextlib.contextmanager
def started(cmd: list[str], log_path: Path, status_port: int, what: str) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, **DUMMY_CREDENTIALS, "AZSIDECAR_NOTIFY_HMAC_KEYS": KEY}
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_for_port("127.0.0.1", status_port, proc, STARTUP_TIMEOUT_S, what, log_path)
        yield proc
    finally:
        stop_process(proc)


@contextlib.contextmanager
def brokers_at(address: str, tansu_bootstrap: str, tmp_path: Path) -> Iterator[None]:
    with running_listener([sys.executable, "-m", "deploy.local.notify_faults", "--route",
                           f"{address}={tansu_bootstrap}"], tmp_path / "relay.log", "the relay"):
        yield


def test_proxy_waits_for_its_brokers_then_serves(tansu, tmp_path):
    bootstrap, port, status_port = f"127.0.0.1:{free_port()}", free_port(), free_port()
    config = tmp_path / "proxy.toml"
    config.write_text(f'zone = "use1-az1"\n[proxy]\nproxy_id = "waiting"\nmetrics_port = {status_port}\n'
                      f'[audit]\nenabled = false\n')
    cmd = [sys.executable, "-m", "azsidecar", "proxy", "--config", str(config), "--listen", f"127.0.0.1:{port}",
           "--bootstrap-servers", bootstrap]
    base = f"http://127.0.0.1:{status_port}"
    with started(cmd, tmp_path / "proxy.log", status_port, "azsidecar proxy") as proc:
        code, answer = poll(f"{base}/readyz", lambda c, a: "waiting for a broker" in a["checks"]["upstream"]["detail"],
                            "the start-up wait in /readyz")
        assert code == 503 and answer["ready"] is False
        detail = answer["checks"]["upstream"]["detail"]
        assert detail.startswith("upstream Metadata: waiting for a broker to answer ("), detail
        assert detail.endswith(f"{bootstrap}: Connection refused"), detail
        assert get(f"{base}/livez") == (200, {"live": True, "detail": "starting: waiting for the upstream brokers"})
        with pytest.raises(OSError):  # not listening for producers yet
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        # A broker that takes connections but does not answer yet (Kafka binds its listener
        # before it serves): still waiting, with that reason.
        host, _, bootstrap_port = bootstrap.rpartition(":")
        with socket.create_server((host, int(bootstrap_port))):
            poll(f"{base}/readyz", lambda c, a: "no answer within 2 s" in a["checks"]["upstream"]["detail"],
                 "a silent broker in /readyz")
            assert proc.poll() is None
        with brokers_at(bootstrap, tansu.bootstrap, tmp_path):
            wait_for_port("127.0.0.1", port, proc, WAIT_TIMEOUT_S, "azsidecar proxy", tmp_path / "proxy.log")
            code, answer = poll(f"{base}/readyz", lambda c, a: c == 200, "ready")
            assert answer["checks"]["upstream"] == {"ok": True, "detail": "upstream Metadata: answered"}
            assert get(f"{base}/livez") == (200, {"live": True, "detail": "event loop turning"})
        log = (tmp_path / "proxy.log").read_text()
        assert "no upstream broker reachable yet, retrying (upstream.startup_wait_s = inf)" in log, log
        assert "upstream brokers reachable after " in log, log


def agent_command(s3_bucket, bootstrap: str, status_port: int, tmp_path: Path) -> list[str]:
    """`azsidecar agent` for use1-az2 with these brokers and status port (the WAL bucket exists)."""
    server, bucket = s3_bucket
    config = tmp_path / "agent.toml"
    config.write_text(f'[agent]\nmetrics_port = {status_port}\n'
                      f'[wal]\nbucket = "{bucket}"\nregion = "us-east-1"\nprefix = "wal/"\nendpoint_url = "{server.endpoint_url}"\n'
                      f'[audit]\nenabled = false\n')
    return [sys.executable, "-m", "azsidecar", "agent", "--config", str(config), "--zone", "use1-az2",
            "--listen", "127.0.0.1:0", "--bootstrap-servers", bootstrap]


def test_agent_waits_for_its_brokers_then_serves(tansu, s3_bucket, tmp_path):
    bootstrap, status_port = f"127.0.0.1:{free_port()}", free_port()
    cmd = agent_command(s3_bucket, bootstrap, status_port, tmp_path)
    base = f"http://127.0.0.1:{status_port}"
    log_path = tmp_path / "agent.log"
    with started(cmd, log_path, status_port, "azsidecar agent") as proc:
        code, answer = poll(f"{base}/readyz", lambda c, a: "waiting for a broker" in a["checks"]["brokers"]["detail"],
                            "the start-up wait in /readyz")
        assert code == 503
        assert answer["checks"]["brokers"]["detail"].endswith(f"{bootstrap}: Connection refused"), answer
        assert get(f"{base}/livez") == (200, {"live": True, "detail": "starting: waiting for the upstream brokers"})
        assert "listening=" not in log_path.read_text()
        with brokers_at(bootstrap, tansu.bootstrap, tmp_path):
            code, answer = poll(f"{base}/readyz", lambda c, a: c == 200, "ready")
            assert answer["checks"]["brokers"] == {"ok": True, "detail": "zone's brokers Metadata: answered"}
            assert "agent zone=use1-az2 event_loop=" in log_path.read_text()
            assert proc.poll() is None
        # SIGTERM while serving: a clean exit (the wait left nothing behind)
        proc.terminate()
        assert proc.wait(timeout=30) == 0


def test_an_agent_stopped_while_waiting_exits_cleanly(s3_bucket, tmp_path):
    bootstrap, status_port = f"127.0.0.1:{free_port()}", free_port()
    cmd = agent_command(s3_bucket, bootstrap, status_port, tmp_path)
    with started(cmd, tmp_path / "agent.log", status_port, "azsidecar agent") as proc:
        poll(f"http://127.0.0.1:{status_port}/readyz",
             lambda c, a: "waiting for a broker" in a["checks"]["brokers"]["detail"], "the start-up wait")
        proc.terminate()
        assert proc.wait(timeout=15) == 0


def test_refusals_against_a_real_socket():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert refusals([f"127.0.0.1:{port}"], 2.0) == []
    assert refusals([f"127.0.0.1:{port}"], 2.0) == [f"127.0.0.1:{port}: Connection refused"]
