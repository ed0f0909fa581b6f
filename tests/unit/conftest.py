"""The unit tier: pure tests that refuse sockets, subprocesses and the JVM.

Strategy: while a test under tests/unit sets up and runs (the `pytest_runtest_setup` and
`pytest_runtest_call` hooks of this directory), the calls that reach the network or start
a process raise `UnitTierViolation`: connecting, binding and sending on a socket,
`socket.create_connection`/`create_server`, `subprocess.Popen`, fork, spawn and exec. The
JVM is covered by the same guard: pyspark starts it as a subprocess and talks to it over a
socket. Fixtures are guarded too, so a unit test cannot ask for moto, Tansu or Spark.

`socket.socketpair` stays allowed: trio and asyncio make one for their wakeup machinery,
so an event loop runs here. Teardown is not guarded: when the tiers share one pytest
session, the shared fixtures of the other tiers (moto, Tansu) may end after a unit test.

A refused call is also recorded, and the test fails even when the code under test swallowed
the exception (a retry loop that catches everything).
"""

from __future__ import annotations

import _posixsubprocess
import contextlib
import os
import socket
import subprocess
from collections.abc import Iterator

import pytest

MOVE = "move this test out of tests/unit, to its package's directory under tests/ (the integration tier)"


class UnitTierViolation(BaseException):
    """A unit test reached for a socket, a subprocess or the JVM.

    A BaseException, like KeyboardInterrupt, so `except Exception` in the code under test
    does not swallow it."""


refused: list[str] = []  # what the running test was refused; tests/unit/test_guard.py reads it


def _refuse(what: str):
    def refuse(*_args, **_kwargs):
        message = f"unit tests may not {what}; {MOVE}"
        refused.append(message)
        raise UnitTierViolation(message)

    return refuse


_SOCKET = "open sockets (connect, bind, send)"
_PROCESS = "start subprocesses or the JVM (fork, spawn, exec)"
GUARDED = (  # (owner, attribute, what it does)
    (socket.socket, "connect", _SOCKET),
    (socket.socket, "connect_ex", _SOCKET),
    (socket.socket, "bind", _SOCKET),
    (socket.socket, "listen", _SOCKET),
    (socket.socket, "sendto", _SOCKET),
    (socket, "create_connection", _SOCKET),
    (socket, "create_server", _SOCKET),
    (subprocess.Popen, "__init__", _PROCESS),
    (subprocess, "_fork_exec", _PROCESS),  # what Popen calls (bound at import) ...
    (_posixsubprocess, "fork_exec", _PROCESS),  # ... and multiprocessing's spawn
    (os, "fork", _PROCESS),
    (os, "forkpty", _PROCESS),
    (os, "posix_spawn", _PROCESS),
    (os, "posix_spawnp", _PROCESS),
    (os, "system", _PROCESS),
    (os, "execv", _PROCESS),
    (os, "execve", _PROCESS),
)


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    refused.clear()
    with pytest.MonkeyPatch.context() as patch:
        for owner, name, what in GUARDED:
            if hasattr(owner, name):
                patch.setattr(owner, name, _refuse(what))
        yield
    if refused:  # the test went on: the code under test swallowed the refusal
        raise UnitTierViolation(f"{refused[0]} (the code under test caught the refusal)")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    with guarded():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    with guarded():
        return (yield)
