"""A multi-broker Kafka-protocol cluster for tests: librdkafka's mock cluster in its own process.

librdkafka (bundled in the confluent-kafka wheel) contains a mock cluster: N brokers on
loopback ports that any client can use, with partition leaders placed per broker, racks,
brokers set down/up and a per-broker round-trip delay. confluent-kafka has no Python API
for it (only `test.mock.num.brokers` inside one client, whose cluster no other client can
steer), so this module calls the C functions with ctypes.

The cluster runs in a child process (`python deploy/local/mock_cluster.py`) so a test can
start and stop it, hang it as a whole (SIGSTOP) and never has librdkafka threads in the
test process. Control channel: one JSON object per line on the child's stdin, one JSON
answer per line on its stdout (`{"ok": ...}` or `{"error": "..."}`); the first line the
child writes is `{"ok": {"bootstraps": "127.0.0.1:p1,..."}}`. The child exits when its
stdin closes, so a parent that dies takes the cluster with it.

Faults: brokers down or slow (a round-trip delay), the whole cluster hung (SIGSTOP), and
the next requests of an API answered with chosen error codes (`fail_requests`).

Quirks (docs/operations-local.md has the list): no CreateTopics (topics are made here, or
auto-created with default partitions on Metadata), sequence numbers are checked only for
transactional producers, a down broker keeps leading its partitions (no failover unless
the test moves the leader).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from deploy.local.processes import STARTUP_TIMEOUT_S

START_TIMEOUT_S = STARTUP_TIMEOUT_S
COMMAND_TIMEOUT_S = 10.0  # one control command: a C call, microseconds unless the child is paused
STOP_TIMEOUT_S = 5.0
HUNG_RTT_MS = 3_600_000  # "hung": the broker accepts TCP and reads, but answers after an hour


class MockClusterError(RuntimeError):
    """The mock cluster could not be started, or refused a command."""


def librdkafka_path() -> str:
    """The librdkafka shared library inside the confluent-kafka wheel. Raises MockClusterError."""
    import confluent_kafka  # noqa: PLC0415 - only the child process and the path lookup need it

    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*")) if libs.is_dir() else []
    if not found:
        raise MockClusterError(f"no librdkafka shared library under {libs}")
    return str(found[0])


class _Native:
    """The C side: one rd_kafka_t handle and its mock cluster (runs in the child)."""

    def __init__(self, broker_count: int) -> None:
        lib = ctypes.CDLL(librdkafka_path())
        vp, cp, i32 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32
        sigs = {
            "rd_kafka_conf_new": ([], vp),
            "rd_kafka_conf_set": ([vp, cp, cp, cp, ctypes.c_size_t], ctypes.c_int),
            "rd_kafka_new": ([ctypes.c_int, vp, cp, ctypes.c_size_t], vp),
            "rd_kafka_destroy": ([vp], None),
            "rd_kafka_mock_cluster_new": ([vp, ctypes.c_int], vp),
            "rd_kafka_mock_cluster_destroy": ([vp], None),
            "rd_kafka_mock_cluster_bootstraps": ([vp], cp),
            "rd_kafka_mock_topic_create": ([vp, cp, ctypes.c_int, ctypes.c_int], ctypes.c_int),
            "rd_kafka_mock_partition_set_leader": ([vp, cp, i32, i32], ctypes.c_int),
            "rd_kafka_mock_partition_set_follower": ([vp, cp, i32, i32], ctypes.c_int),
            "rd_kafka_mock_broker_set_rack": ([vp, i32, cp], ctypes.c_int),
            "rd_kafka_mock_broker_set_down": ([vp, i32], ctypes.c_int),
            "rd_kafka_mock_broker_set_up": ([vp, i32], ctypes.c_int),
            "rd_kafka_mock_broker_set_rtt": ([vp, i32, ctypes.c_int], ctypes.c_int),
            "rd_kafka_mock_coordinator_set": ([vp, cp, cp, i32], ctypes.c_int),
            "rd_kafka_mock_start_request_tracking": ([vp], None),
            "rd_kafka_mock_get_requests": ([vp, ctypes.POINTER(ctypes.c_size_t)], ctypes.POINTER(vp)),
            "rd_kafka_mock_request_api_key": ([vp], ctypes.c_int16),
            "rd_kafka_mock_request_id": ([vp], i32),
            "rd_kafka_mock_request_destroy_array": ([ctypes.POINTER(vp), ctypes.c_size_t], None),
            "rd_kafka_err2str": ([ctypes.c_int], cp),
            "rd_kafka_mock_push_request_errors_array": ([vp, ctypes.c_int16, ctypes.c_size_t,
                                                         ctypes.POINTER(ctypes.c_int)], None),
        }
        for name, (args, res) in sigs.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, res
        self._lib = lib
        errstr = ctypes.create_string_buffer(512)
        conf = lib.rd_kafka_conf_new()
        lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, len(errstr))
        self._rk = lib.rd_kafka_new(0, conf, errstr, len(errstr))  # RD_KAFKA_PRODUCER; takes conf
        if not self._rk:
            raise MockClusterError(f"rd_kafka_new failed: {errstr.value.decode()}")
        self._cluster = lib.rd_kafka_mock_cluster_new(self._rk, broker_count)
        if not self._cluster:
            lib.rd_kafka_destroy(self._rk)
            raise MockClusterError("rd_kafka_mock_cluster_new failed")

    def bootstraps(self) -> str:
        bootstraps: bytes = self._lib.rd_kafka_mock_cluster_bootstraps(self._cluster)  # ctypes: a char *
        return bootstraps.decode()

    def _check(self, code: int, what: str) -> None:
        if code != 0:
            raise MockClusterError(f"{what}: {self._lib.rd_kafka_err2str(code).decode()} ({code})")

    def call(self, op: str, args: Mapping[str, Any]) -> Any:
        """Run one control command. Raises MockClusterError, KeyError on missing arguments."""
        lib, c = self._lib, self._cluster
        if op == "bootstraps":
            return {"bootstraps": self.bootstraps()}
        if op == "track_requests":
            lib.rd_kafka_mock_start_request_tracking(c)
            return True
        if op == "requests":
            count = ctypes.c_size_t(0)
            array = lib.rd_kafka_mock_get_requests(c, ctypes.byref(count))
            try:
                return [[lib.rd_kafka_mock_request_id(array[i]), lib.rd_kafka_mock_request_api_key(array[i])]
                        for i in range(count.value)]
            finally:
                if array:
                    lib.rd_kafka_mock_request_destroy_array(array, count.value)
        if op == "topic_create":
            self._check(lib.rd_kafka_mock_topic_create(c, args["topic"].encode(), args["partitions"],
                                                       args.get("replication", 1)), op)
        elif op == "set_leader":
            self._check(lib.rd_kafka_mock_partition_set_leader(c, args["topic"].encode(), args["partition"],
                                                               args["broker"]), op)
        elif op == "set_follower":
            self._check(lib.rd_kafka_mock_partition_set_follower(c, args["topic"].encode(), args["partition"],
                                                                 args["broker"]), op)
        elif op == "set_rack":
            self._check(lib.rd_kafka_mock_broker_set_rack(c, args["broker"], args["rack"].encode()), op)
        elif op == "down":
            self._check(lib.rd_kafka_mock_broker_set_down(c, args["broker"]), op)
        elif op == "up":
            self._check(lib.rd_kafka_mock_broker_set_up(c, args["broker"]), op)
        elif op == "rtt":
            self._check(lib.rd_kafka_mock_broker_set_rtt(c, args["broker"], args["rtt_ms"]), op)
        elif op == "request_errors":
            codes = [int(code) for code in args["errors"]]
            if not codes:
                raise MockClusterError("request_errors: no error codes")
            lib.rd_kafka_mock_push_request_errors_array(c, int(args["api_key"]), len(codes),
                                                        (ctypes.c_int * len(codes))(*codes))
        elif op == "coordinator":
            self._check(lib.rd_kafka_mock_coordinator_set(c, args["key_type"].encode(), args["key"].encode(),
                                                          args["broker"]), op)
        else:
            raise MockClusterError(f"unknown command {op!r}")
        return True

    def close(self) -> None:
        self._lib.rd_kafka_mock_cluster_destroy(self._cluster)
        self._lib.rd_kafka_destroy(self._rk)


def serve(broker_count: int, inp: TextIO = sys.stdin, out: TextIO = sys.stdout) -> None:
    """The child's loop: answer commands until stdin closes."""
    try:
        native = _Native(broker_count)
    except MockClusterError as exc:
        out.write(json.dumps({"error": str(exc)}) + "\n")
        out.flush()
        return
    try:
        out.write(json.dumps({"ok": {"bootstraps": native.bootstraps()}}) + "\n")
        out.flush()
        for line in inp:
            if not line.strip():
                continue
            try:
                command = json.loads(line)
                answer = {"ok": native.call(command["op"], command)}
            except (MockClusterError, KeyError, TypeError, ValueError) as exc:
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            out.write(json.dumps(answer) + "\n")
            out.flush()
    finally:
        native.close()


@dataclass
class MockCluster:
    """Parent-side handle of a running mock cluster. Broker ids are 1..broker_count."""

    proc: subprocess.Popen[str]
    bootstraps: tuple[str, ...]
    log_path: Path

    def address(self, broker_id: int) -> str:
        """host:port of a broker (the mock lists its brokers in id order)."""
        return self.bootstraps[broker_id - 1]

    @property
    def bootstrap(self) -> str:
        return ",".join(self.bootstraps)

    def command(self, op: str, **args: Any) -> Any:
        """Send one command; its answer. Raises MockClusterError (refused, or no answer in time)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise MockClusterError(f"mock cluster is gone: {exc}") from exc
        answer = _read_answer(self.proc, COMMAND_TIMEOUT_S, self.log_path)
        if "error" in answer:
            raise MockClusterError(f"{op} {args}: {answer['error']}")
        return answer["ok"]

    def create_topic(self, topic: str, partitions: int, replication: int = 1) -> None:
        self.command("topic_create", topic=topic, partitions=partitions, replication=replication)

    def set_leader(self, topic: str, partition: int, broker_id: int) -> None:
        self.command("set_leader", topic=topic, partition=partition, broker=broker_id)

    def set_rack(self, broker_id: int, rack: str) -> None:
        self.command("set_rack", broker=broker_id, rack=rack)

    def set_down(self, broker_id: int) -> None:
        self.command("down", broker=broker_id)

    def set_up(self, broker_id: int) -> None:
        self.command("up", broker=broker_id)

    def set_rtt(self, broker_id: int, rtt_ms: int) -> None:
        """Delay every answer of the broker by rtt_ms (HUNG_RTT_MS: a broker that hangs)."""
        self.command("rtt", broker=broker_id, rtt_ms=rtt_ms)

    def fail_requests(self, api_key: int, errors: Sequence[int]) -> None:
        """Answer the next len(errors) requests of api_key (any broker) with these error codes, one
        each, instead of serving them (a Produce so answered appends nothing)."""
        self.command("request_errors", api_key=api_key, errors=list(errors))

    def track_requests(self) -> None:
        """From now on, remember every request the brokers receive (see `requests`)."""
        self.command("track_requests")

    def requests(self) -> list[tuple[int, int]]:
        """(broker id, api key) of every request received since `track_requests`, in order."""
        return [tuple(r) for r in self.command("requests")]

    def pause(self) -> None:
        """Freeze the whole cluster (SIGSTOP): sockets stay open, nothing answers."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)


def _read_answer(proc: subprocess.Popen[str], timeout_s: float, log_path: Path) -> dict[str, Any]:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise MockClusterError(f"mock cluster did not answer within {timeout_s}s")
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            line = proc.stdout.readline()
            if not line:
                raise MockClusterError(f"mock cluster exited ({proc.poll()}): {_tail(log_path)}")
            answer: dict[str, Any] = json.loads(line)  # the child's JSON answer
            return answer


def _tail(path: Path, n: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


@contextlib.contextmanager
def start_mock_cluster(broker_count: int = 3, *, racks: Mapping[int, str] | None = None,
                       topics: Mapping[str, int] | None = None, log_dir: Path | None = None) -> Iterator[MockCluster]:
    """A running mock cluster of `broker_count` brokers; racks {broker_id: rack}; topics {name: partitions}.

    Raises MockClusterError if it does not start. The process is always stopped on exit.
    """
    log_dir = Path(log_dir) if log_dir else Path(os.environ.get("TMPDIR", "/tmp"))
    log_path = log_dir / f"mock-cluster-{os.getpid()}-{time.monotonic_ns()}.log"
    with open(log_path, "wb") as err:
        proc = subprocess.Popen([sys.executable, __file__, "--brokers", str(broker_count)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1,
                                start_new_session=True)
    try:
        first = _read_answer(proc, START_TIMEOUT_S, log_path)
        if "error" in first:
            raise MockClusterError(f"mock cluster did not start: {first['error']}")
        cluster = MockCluster(proc, tuple(first["ok"]["bootstraps"].split(",")), log_path)
        for broker_id, rack in (racks or {}).items():
            cluster.set_rack(broker_id, rack)
        for name, partitions in (topics or {}).items():
            cluster.create_topic(name, partitions)
        yield cluster
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)  # a paused child cannot read the EOF
    with contextlib.suppress(OSError):
        if proc.stdin is not None:
            proc.stdin.close()
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=STOP_TIMEOUT_S)
    if proc.stdout is not None:
        proc.stdout.close()


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=3)
    serve(parser.parse_args().brokers)
