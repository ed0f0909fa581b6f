"""The status port of a real `azsidecar proxy`: /metrics, /livez, /readyz with the reasons.

The proxy runs in front of Tansu with the WAL path configured to an agent address where
nothing listens: with router.fallback "direct" the zone is on fallback and the proxy is
ready; with "fail" it is not, and /readyz says which check failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.local.processes import DUMMY_CREDENTIALS, STARTUP_TIMEOUT_S, free_port, stop_process, wait_for_port

pytestmark = pytest.mark.integration

FIRST_PROBE_TIMEOUT_S = 15.0  # the monitor probes at start and every 5 s (azsidecar/readiness.py)
KEY = "0123456789abcdef-notify-key"


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def readyz_after_first_probe(base: str) -> tuple[int, dict]:
    """/readyz once the monitor's first probe is in (before it, 'upstream' says 'not probed yet')."""
    deadline = time.monotonic() + FIRST_PROBE_TIMEOUT_S
    while True:
        code, body = get(f"{base}/readyz")
        answer = json.loads(body)
        if "not probed yet" not in answer["checks"]["upstream"]["detail"] or time.monotonic() > deadline:
            return code, answer
        time.sleep(0.2)  # polling an HTTP endpoint for a condition, bounded by the deadline


@contextlib.contextmanager
def proxy(tansu_bootstrap: str, endpoint: str, bucket: str, tmp_path: Path, fallback: str,
          log_format: str = "text") -> Iterator[str]:
    """A proxy process; its stdout and stderr go to tmp_path / proxy-<fallback>.log."""
    port, status_port, dead_agent = free_port(), free_port(), free_port()
    config = tmp_path / f"proxy-{fallback}.toml"
    config.write_text(f'zone = "use1-az1"\nlog_format = "{log_format}"\n[proxy]\nproxy_id = "status-{fallback}"\nmetrics_port = {status_port}\n'
                      f'[router]\nfallback = "{fallback}"\n'
                      f'[wal]\nbucket = "{bucket}"\nregion = "us-east-1"\nprefix = "wal/"\nendpoint_url = "{endpoint}"\n'
                      f'[notify.agents]\n"use1-az2" = "127.0.0.1:{dead_agent}"\n'
                      f'[audit]\noutput = "{tmp_path / "audit"}"\n')
    log_path = tmp_path / f"proxy-{fallback}.log"
    env = {**os.environ, **DUMMY_CREDENTIALS, "AZSIDECAR_NOTIFY_HMAC_KEYS": KEY}
    cmd = [sys.executable, "-m", "azsidecar", "proxy", "--config", str(config), "--listen", f"127.0.0.1:{port}",
           "--bootstrap-servers", tansu_bootstrap]
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_for_port("127.0.0.1", port, proc, STARTUP_TIMEOUT_S, "azsidecar proxy", log_path)
        yield f"http://127.0.0.1:{status_port}"
    finally:
        stop_process(proc)


def test_ready_on_fallback_and_the_other_endpoints(tansu, s3_bucket, tmp_path):
    server, bucket = s3_bucket
    with proxy(tansu.bootstrap, server.endpoint_url, bucket, tmp_path, "direct") as base:
        code, answer = readyz_after_first_probe(base)
        assert code == 200, answer
        assert answer["ready"] is True
        assert answer["checks"]["upstream"] == {"ok": True, "detail": "upstream Metadata: answered"}
        assert answer["checks"]["draining"] == {"ok": True, "detail": "serving"}
        zone = answer["checks"]["zone:use1-az2"]
        assert zone["ok"] is True and zone["detail"].startswith("fallback to direct (agent: ")
        # No agent listens there: the probe was refused, and the router's zone circuit counts
        # it with its cause (router/zone_health.py; one of the two failures that open it).
        assert "(refused); circuit closed: agent_gone after 1 failure(s) (agent probe: " in zone["detail"], zone
        code, body = get(f"{base}/livez")
        assert (code, json.loads(body)) == (200, {"live": True, "detail": "event loop turning"})
        code, body = get(f"{base}/metrics")
        assert code == 200 and b"azsidecar_proxy_open_connections" in body
        code, body = get(f"{base}/")
        assert code == 404 and b"/readyz" in body


def test_not_ready_without_a_wal_path_when_fallback_is_fail(tansu, s3_bucket, tmp_path):
    server, bucket = s3_bucket
    with proxy(tansu.bootstrap, server.endpoint_url, bucket, tmp_path, "fail", log_format="json") as base:
        code, answer = readyz_after_first_probe(base)
        assert code == 503
        assert answer["ready"] is False
        assert answer["checks"]["upstream"]["ok"] is True
        zone = answer["checks"]["zone:use1-az2"]
        assert zone["ok"] is False and zone["detail"].startswith("no WAL path and router.fallback = fail")
        # what the AzsidecarNotReady alert reads, with the proxy's zone and component
        _, body = get(f"{base}/metrics")
        assert b'azsidecar_ready{component="proxy",zone="use1-az1"} 0.0' in body, body
    # Every JSON log line carries the proxy's zone and component.
    lines = [json.loads(line) for line in (tmp_path / "proxy-fail.log").read_text().splitlines() if line.strip()]
    assert lines
    assert {(x["zone"], x["component"]) for x in lines} == {("use1-az1", "proxy")}, lines


def test_agent_status_port(tansu, s3_bucket, tmp_path):
    server, bucket = s3_bucket
    status_port = free_port()
    config = tmp_path / "agent.toml"
    config.write_text(f'[agent]\nmetrics_port = {status_port}\n'
                      f'[wal]\nbucket = "{bucket}"\nregion = "us-east-1"\nprefix = "wal/"\nendpoint_url = "{server.endpoint_url}"\n'
                      f'[audit]\nenabled = false\n')
    env = {**os.environ, **DUMMY_CREDENTIALS, "AZSIDECAR_NOTIFY_HMAC_KEYS": KEY}
    log_path = tmp_path / "agent.log"
    cmd = [sys.executable, "-m", "azsidecar", "agent", "--config", str(config), "--zone", "use1-az2",
           "--listen", "127.0.0.1:0", "--bootstrap-servers", tansu.bootstrap]
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_for_port("127.0.0.1", status_port, proc, STARTUP_TIMEOUT_S, "azsidecar agent", log_path)
        deadline = time.monotonic() + FIRST_PROBE_TIMEOUT_S
        while True:
            code, body = get(f"http://127.0.0.1:{status_port}/readyz")
            answer = json.loads(body)
            if code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.2)  # polling for the first probe, bounded by the deadline
        assert (code, answer) == (200, {"ready": True, "checks": {
            "draining": {"ok": True, "detail": "serving"},
            "brokers": {"ok": True, "detail": "zone's brokers Metadata: answered"}}})
        code, body = get(f"http://127.0.0.1:{status_port}/livez")
        assert code == 200
    finally:
        stop_process(proc)
