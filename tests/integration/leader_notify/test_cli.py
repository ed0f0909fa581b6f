"""`azsidecar agent` as a process: starts, serves a notification, stops on SIGTERM."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time

import pytest
import trio

from core.audit import MemoryAuditSink
from deploy.local.processes import STARTUP_TIMEOUT_S
from leader_notify.sender.sender import NotifySender
from tests.conftest import create_topics, unique_name
from tests.integration.leader_notify.helpers import KEYS, config_for, consume, put_object, wal_entry

START_TIMEOUT_S = STARTUP_TIMEOUT_S


def _read_line(proc: subprocess.Popen, timeout_s: float) -> str:
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sel.select(timeout=deadline - time.monotonic()):
            return proc.stdout.readline().decode()
    raise TimeoutError("no output from the agent")


def _agent_cmd(config_path, bootstrap, *extra):
    return [sys.executable, "-m", "azsidecar", "agent", "--zone", "az2", "--config", str(config_path),
            "--listen", "127.0.0.1:0", "--bootstrap-servers", bootstrap, *extra]


def _write_config(path, endpoint, bucket, audit_dir, event_loop=None):
    path.write_text(f'[wal]\nbucket = "{bucket}"\nregion = "us-east-1"\nprefix = "wal/"\nendpoint_url = "{endpoint}"\n'
                    f'[audit]\noutput = "{audit_dir}"\n'
                    + (f'[agent]\nevent_loop = "{event_loop}"\n' if event_loop else ""))


@pytest.mark.integration
@pytest.mark.trio
@pytest.mark.parametrize("event_loop,expected", [(None, "uvloop"), ("asyncio", "asyncio")])
async def test_agent_command_serves_and_stops_on_sigterm(s3_bucket, tansu, tmp_path, event_loop, expected):
    server, bucket = s3_bucket
    topic = unique_name("cli")
    create_topics(tansu.bootstrap, {topic: 1})
    cfg = tmp_path / "agent.toml"
    _write_config(cfg, server.endpoint_url, bucket, tmp_path / "audit", event_loop)
    env = {**os.environ, "AZSIDECAR_NOTIFY_HMAC_KEYS": ",".join(KEYS),
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    proc = subprocess.Popen(_agent_cmd(cfg, tansu.bootstrap), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=env)
    try:
        line = await trio.to_thread.run_sync(_read_line, proc, START_TIMEOUT_S)
        # The default loop is uvloop; the line names the loop the process actually runs.
        assert line.startswith(f"agent zone=az2 event_loop={expected} listening=127.0.0.1:")
        address = line.strip().rpartition("=")[2]
        obj = put_object(server.client(), bucket, "wal/cli/obj-1", {"az2": [wal_entry(topic, 0, [b"via-cli"])]})
        config = config_for(server.endpoint_url, bucket, tansu.bootstrap, agents={"az2": address})
        sender = NotifySender(config.notify, "az1", "proxy-a", 1, MemoryAuditSink(), bucket=bucket)
        try:
            results = await sender.notify(obj, "az2")
        finally:
            await sender.aclose()
        assert [(r.error_code, r.base_offset) for r in results] == [(0, 0)]
        proc.send_signal(signal.SIGTERM)
        assert await trio.to_thread.run_sync(lambda: proc.wait(timeout=20)) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert consume(tansu.bootstrap, topic, 0) == [(0, b"via-cli")]
    # The agent's audit writer left gzip JSON lines with its agent_read record.
    assert list((tmp_path / "audit").rglob("*.gz"))


def test_agent_command_without_keys_is_a_config_error(tmp_path):
    cfg = tmp_path / "agent.toml"
    _write_config(cfg, "http://127.0.0.1:9", "b", tmp_path / "audit")
    env = {k: v for k, v in os.environ.items() if k != "AZSIDECAR_NOTIFY_HMAC_KEYS"}
    done = subprocess.run(_agent_cmd(cfg, "127.0.0.1:9"), capture_output=True, env=env, timeout=60)
    assert done.returncode == 2
    assert b"notify.hmac_keys" in done.stderr
