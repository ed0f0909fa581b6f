"""The unit tier's guard (tests/unit/conftest.py): what it refuses, and that event loops still run."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import socket
import subprocess
import sys

import pytest
import trio
import trio.testing

from tests.unit.conftest import UnitTierViolation, guarded, refused


@contextlib.contextmanager
def refusal(match: str):
    """One call refused on purpose; forgotten after, or the guard would fail this test too."""
    with pytest.raises(UnitTierViolation, match=match):
        yield
    assert len(refused) == 1
    refused.clear()


def _connect() -> None:
    with socket.socket() as s:
        s.connect(("127.0.0.1", 9))


def _connect_ex() -> None:
    with socket.socket() as s:
        s.connect_ex(("127.0.0.1", 9))


def _bind() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))


def _fork() -> None:
    pid = os.fork()
    if pid == 0:  # only if the guard let it through: the child leaves at once
        os._exit(0)
    os.waitpid(pid, 0)


def _udp() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"x", ("127.0.0.1", 9))


@pytest.mark.parametrize("call", [
    _connect, _connect_ex, _bind, _udp,
    lambda: socket.create_connection(("127.0.0.1", 9), timeout=1),
    lambda: socket.create_server(("127.0.0.1", 0)),
], ids=["connect", "connect_ex", "bind", "sendto", "create_connection", "create_server"])
def test_sockets_are_refused(call):
    with refusal("unit tests may not open sockets.*move this test out of tests/unit"):
        call()


@pytest.mark.parametrize("call", [
    lambda: subprocess.run([sys.executable, "-c", "pass"], check=True),
    lambda: os.system("true"),
    _fork,
    lambda: os.posix_spawn(sys.executable, [sys.executable, "-c", "pass"], os.environ),
    lambda: multiprocessing.get_context("spawn").Process(target=print).start(),
], ids=["subprocess", "system", "fork", "posix_spawn", "multiprocessing"])
def test_processes_are_refused(call):
    with refusal("unit tests may not start subprocesses or the JVM"):
        call()


def test_a_refusal_the_code_swallows_still_fails_the_test():
    def swallowing_connect() -> None:
        try:
            _connect()
        except BaseException:  # noqa: BLE001 - code under test that catches everything
            pass

    with pytest.raises(UnitTierViolation, match="open sockets.*the code under test caught the refusal"):
        with guarded():  # what the hooks wrap each test's setup and call in
            swallowing_connect()
    refused.clear()


def test_loopback_event_loops_still_run():
    """trio and asyncio make a socketpair for their wakeup: allowed, and so are memory streams."""
    async def trio_main() -> bytes:
        send, receive = trio.testing.memory_stream_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send.send_all, b"ping")
            return await receive.receive_some(4)

    async def asyncio_main() -> int:
        return await asyncio.to_thread(lambda: 42)

    assert trio.run(trio_main) == b"ping"
    assert asyncio.run(asyncio_main()) == 42
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"x")
        assert b.recv(1) == b"x"


@pytest.mark.trio
async def test_pytest_trio_runs():
    await trio.sleep(0)
    with trio.move_on_after(0.01) as scope:
        await trio.sleep_forever()
    assert scope.cancelled_caught
