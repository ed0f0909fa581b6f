"""Fixtures for the proxy's tests: a real `azsidecar proxy` process in front of Tansu.

The proxy runs as a subprocess (exactly as in production) so blocking clients
(confluent-kafka, kafka-python, kcat) can talk to it from the test thread. One proxy
serves the whole session; tests that need their own (limits, metrics) start one with
`start_proxy`.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deploy.local.processes import STARTUP_TIMEOUT_S, free_port, stop_process, wait_for_port

PROXY_STARTUP_TIMEOUT_S = STARTUP_TIMEOUT_S  # interpreter start + imports + first upstream ApiVersions
TEST_ZONE = "use1-az1"  # a zone id; with no other zones configured every partition is direct


@dataclass
class ProxyProcess:
    host: str
    port: int
    proc: subprocess.Popen
    log_path: Path

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextlib.contextmanager
def start_proxy(upstream_bootstrap: str, log_dir: Path, extra_args: tuple[str, ...] = (),
                config_file: Path | None = None, port: int = 0) -> Iterator[ProxyProcess]:
    """`python -m azsidecar proxy` on `port` (0: a free loopback port); terminated on exit."""
    port = port or free_port()
    log_path = log_dir / f"proxy-{port}.log"
    cmd = [sys.executable, "-m", "azsidecar", "proxy", "--listen", f"127.0.0.1:{port}",
           "--bootstrap-servers", upstream_bootstrap, "--zone", TEST_ZONE, "--log-level", "INFO", *extra_args]
    if config_file is None:  # keep the audit trail out of the working directory
        config_file = log_dir / f"proxy-{port}.toml"
        config_file.write_text(f'[audit]\noutput = "{log_dir / f"audit-{port}"}"\n')
    cmd += ["--config", str(config_file)]
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_port("127.0.0.1", port, proc, PROXY_STARTUP_TIMEOUT_S, "azsidecar proxy", log_path)
        yield ProxyProcess("127.0.0.1", port, proc, log_path)
    finally:
        stop_process(proc)


@pytest.fixture(scope="session")
def proxy(tansu, tmp_path_factory):
    """One proxy process in front of the session's Tansu broker."""
    with start_proxy(tansu.bootstrap, tmp_path_factory.mktemp("proxy")) as p:
        yield p
