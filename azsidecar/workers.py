"""`proxy.workers = N`: N proxy processes sharing one listener, so a gateway uses all its cores.

The supervisor (the `azsidecar proxy` process) holds the port with a bound, not listening
SO_REUSEPORT socket and starts N worker processes (multiprocessing, spawn). Worker i is a
whole proxy of its own: proxy id `<proxy_id>-w<i>` (its WAL writer id, so its own epoch
and objects), status port `metrics_port + i`, the same advertised address. The kernel
spreads new connections over the workers' listening sockets.

SIGTERM/SIGINT to the supervisor is passed to every worker, which drains as a single proxy
does; the supervisor waits `shutdown_grace_s` + 10 s, then kills what is left. A worker
that dies is started again (a new epoch fences its old writer) after RESTART_DELAY_S,
unless it exited with the configuration-error code, or died MAX_QUICK_FAILURES times in a
row within MIN_UPTIME_S of its start (a port taken, brokers unreachable): both stop them
all, with exit code 2 or 1, for the service manager to see. Workers die
with the supervisor (PR_SET_PDEATHSIG), so a killed supervisor leaves no orphans.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import multiprocessing
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from types import FrameType

from azsidecar.config import Config
from azsidecar.failures import EXIT_CONFIG, EXIT_ENVIRONMENT
from proxy.listen import reserve_port

log = logging.getLogger("azsidecar.workers")

RESTART_DELAY_S = 1.0  # between a worker's death and its replacement: a crash loop stays slow
MIN_UPTIME_S = 10.0  # a worker dying sooner than this after its start failed to start
MAX_QUICK_FAILURES = 3  # in a row, for one worker: the environment is wrong, stop them all
KILL_AFTER_GRACE_S = 10.0  # beyond shutdown_grace_s, for the WAL drain's last PUT and notifications
PR_SET_PDEATHSIG = 1


def worker_config(config: Config, index: int, port: int) -> Config:
    """Worker `index`'s configuration: its own proxy id and status port, the shared port."""
    proxy = config.proxy
    return dataclasses.replace(config, proxy=dataclasses.replace(
        proxy, proxy_id=f"{proxy.proxy_id}-w{index}", listen_port=port,
        metrics_port=proxy.metrics_port + index if proxy.metrics_port else 0))


def die_with_parent() -> None:
    """Ask Linux to SIGTERM this process when its parent dies (no-op elsewhere)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        log.debug("PR_SET_PDEATHSIG unavailable: workers outlive a killed supervisor")


class _Stop(Exception):
    """Raised by the signal handler to leave the wait."""


def supervise(config: Config, target: Callable[[Config, int], None]) -> int:
    """Run `config.proxy.workers` processes of `target(worker_config, index)` until a signal.

    Returns the exit code: 0 after a signal, EXIT_CONFIG when a worker refused its configuration,
    EXIT_ENVIRONMENT when one kept failing right after its start.
    Raises OSError if the port cannot be held.
    """
    holder, port = reserve_port(config.proxy.listen_host, config.proxy.listen_port)
    context = multiprocessing.get_context("spawn")
    procs: dict[int, BaseProcess] = {}
    started_at: dict[int, float] = {}
    quick_failures: dict[int, int] = {}

    def start(index: int) -> None:
        proc = context.Process(target=target, args=(worker_config(config, index, port), index),
                               name=f"azsidecar-proxy-w{index}")
        proc.start()
        procs[index] = proc
        started_at[index] = time.monotonic()
        log.info("worker %d started (pid %s, proxy id %s-w%d, port %d)", index, proc.pid,
                 config.proxy.proxy_id, index, port)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        raise _Stop(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    code = 0
    try:
        for index in range(config.proxy.workers):
            start(index)
        while True:
            ready = wait([p.sentinel for p in procs.values()])
            for index, proc in list(procs.items()):
                if proc.sentinel not in ready:
                    continue
                proc.join()
                if proc.exitcode == EXIT_CONFIG:
                    log.error("worker %d refused its configuration; stopping every worker", index)
                    code = EXIT_CONFIG
                    raise _Stop(0)
                quick = time.monotonic() - started_at[index] < MIN_UPTIME_S
                quick_failures[index] = quick_failures.get(index, 0) + 1 if quick else 0
                if quick_failures[index] >= MAX_QUICK_FAILURES:
                    log.error("worker %d failed %d times within %.0f s of its start (last exit %s); stopping every "
                              "worker", index, quick_failures[index], MIN_UPTIME_S, proc.exitcode)
                    code = EXIT_ENVIRONMENT
                    raise _Stop(0)
                log.error("worker %d (pid %s) exited with %s; starting it again in %.0f s", index, proc.pid,
                          proc.exitcode, RESTART_DELAY_S)
                time.sleep(RESTART_DELAY_S)
                start(index)
    except _Stop:
        log.info("stopping %d workers", len(procs))
    finally:
        for s in previous:  # a second signal must not cut the drain short
            signal.signal(s, signal.SIG_IGN)
        for proc in procs.values():
            if proc.is_alive():
                proc.terminate()  # SIGTERM: each drains like a single proxy
        deadline = time.monotonic() + config.proxy.shutdown_grace_s + KILL_AFTER_GRACE_S
        for proc in procs.values():
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                log.error("worker pid %s still running after the grace period: killing it", proc.pid)
                proc.kill()
                proc.join()
        holder.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
    return code
