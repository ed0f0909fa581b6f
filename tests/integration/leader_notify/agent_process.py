"""`azsidecar agent` as a real process (for restarts with SIGTERM and kill -9), and a raw
protocol client that records the bytes it sends (for replays)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from deploy.local.processes import DUMMY_CREDENTIALS, free_port
from deploy.local.sidecar_stack import READY_LINES, _wait_for_log_line, to_toml
from leader_notify import protocol as p
from tests.integration.leader_notify.helpers import KEYS

READY_TIMEOUT_S = 120.0  # a Python process start: ~1.5 CPU-s of imports, many starting at once on a loaded 2-core host
STOP_TIMEOUT_S = 15.0
IO_TIMEOUT_S = 15.0


class AgentProcess:
    """One agent process of `zone` on a fixed port; restartable on the same port."""

    def __init__(self, tmp: Path, name: str, zone: str, *, endpoint_url: str, bucket: str, bootstrap: str,
                 extra: dict | None = None, source: Path | None = None,
                 ready_timeout_s: float = READY_TIMEOUT_S, wal: dict | None = None) -> None:
        """`extra`: more [agent] settings, `wal`: more [wal] settings; `source`: run the agent of
        that source tree (another release's) instead of this one."""
        self.source = source
        self.ready_timeout_s = ready_timeout_s
        self.port = free_port()
        self.name = name
        self.log_path = tmp / f"{name}.log"
        self.config_path = tmp / f"{name}.toml"
        config = {
            "zone": zone,
            "upstream": {"bootstrap_servers": [bootstrap]},
            "wal": {"bucket": bucket, "region": "us-east-1", "prefix": "wal/", "endpoint_url": endpoint_url,
                    **(wal or {})},
            "agent": {"listen_host": "127.0.0.1", "listen_port": self.port, "metrics_port": 0,
                      **(extra or {})},
        }
        self.config_path.write_text(to_toml(config))
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> AgentProcess:
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        env = {**os.environ, **DUMMY_CREDENTIALS, "AZSIDECAR_NOTIFY_HMAC_KEYS": ",".join(KEYS),
               "AWS_DEFAULT_REGION": "us-east-1"}
        if self.source is not None:  # its packages first on the path, ahead of the installed checkout
            env["PYTHONPATH"] = str(self.source)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "azsidecar", "agent", "--config",
                                          str(self.config_path)], stdout=log, stderr=subprocess.STDOUT, env=env,
                                         cwd=self.source)
        _wait_for_log_line(self.proc, self.log_path, READY_LINES["agent"], self.ready_timeout_s, self.name, offset)
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT_S)

    def rss_kib(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def recv_until_closed_or_frame(sock: socket.socket, channel: p.Channel) -> p.Frame | None:
    """The next frame the agent sends, or None if it closes the connection first.
    Raises ProtocolError/AuthError for a frame that does not verify."""
    while True:
        frame = channel.next_frame()
        if frame is not None:
            return frame
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return None
        if not data:
            return None
        channel.receive_data(data)


def notify_recording(address: str, request: p.NotifyRequest) -> tuple[p.NotifyResponse, bytes]:
    """Send `request` as a well-behaved proxy on a new connection: its response and every
    byte the proxy sent (HELLO and request frame), as a listener on the path would capture."""
    channel = p.Channel(p.Keyring([k.encode() for k in KEYS]), p.Role.PROXY, os.urandom(p.CHALLENGE_BYTES))
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=IO_TIMEOUT_S) as sock:
        sent = channel.hello()
        sock.sendall(sent)
        while not channel.established:
            data = sock.recv(65536)
            assert data, "agent closed before its HELLO"
            channel.receive_data(data)
            assert channel.next_frame() is None
        frame_bytes = channel.send(p.MessageType.REQUEST, p.encode_request(request))
        sock.sendall(frame_bytes)
        sent += frame_bytes
        frame = recv_until_closed_or_frame(sock, channel)
        assert frame is not None, "agent closed instead of answering"
        return p.decode_response(frame.payload), sent


def replay(address: str, captured: bytes) -> tuple[bool, bytes]:
    """Send captured bytes on a new connection as they are; (did the agent answer anything
    beyond its HELLO, everything it sent). The agent must close without an answer."""
    host, _, port = address.rpartition(":")
    received = b""
    with socket.create_connection((host, int(port)), timeout=IO_TIMEOUT_S) as sock:
        sock.sendall(captured)
        deadline = time.monotonic() + IO_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            received += data
        else:
            raise TimeoutError("the agent neither answered nor closed")
    return len(received) > p.HELLO_FRAME_BYTES, received
