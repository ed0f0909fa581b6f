"""Collect the facts /livez and /readyz answer from, on the process's own event loop.

The proxy's monitor (trio) asks the upstream cluster for Metadata, opens a TCP connection
to each other zone's agent and reads the router's circuits every PROBE_INTERVAL_S; the
agent's (asyncio) asks its zone's brokers. A heartbeat task records that the loop turns.
The status server's thread reads the latest facts (one attribute, replaced whole).
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import time
from collections.abc import Awaitable, Callable, Mapping

import trio
from prometheus_client import Gauge

from azsidecar.readiness import (
    PROBE_INTERVAL_S,
    AgentFacts,
    Check,
    Probe,
    ProxyFacts,
    assess_agent,
    assess_proxy,
    liveness,
    ready,
)
from router.zone_health import Signal

READY = Gauge("azsidecar_ready", "1 while /readyz answers 200, as of the monitor's last probe (every 5 s)",
              ["component"])
HEARTBEAT_S = 1.0
PROBE_TIMEOUT_S = 4.0  # under PROBE_INTERVAL_S: a hung broker or agent is a failed probe, not a stuck monitor


class _StartupWait:
    """While start-up waits for the brokers (azsidecar/broker_wait.py) no event loop turns yet:
    the process is alive (a restart would only start the wait again) and not ready, with the
    wait's reason as the brokers' failed probe."""

    heartbeat: float
    starting: str | None = None  # the wait's latest reason while waiting

    def waiting_for_brokers(self, detail: str) -> None:
        self.starting = detail
        self._failed_probe(Probe(False, detail, time.monotonic()))

    def brokers_reachable(self) -> None:
        self.starting = None
        self.heartbeat = time.monotonic()

    def _failed_probe(self, probe: Probe) -> None:
        raise NotImplementedError

    def live(self) -> Check:
        if self.starting is not None:
            return Check(True, "starting: waiting for the upstream brokers")
        return liveness(self.heartbeat, time.monotonic())


class ProxyHealth(_StartupWait):
    def __init__(self, fallback: str, draining: Callable[[], bool] = lambda: False) -> None:
        self.heartbeat = time.monotonic()
        self.facts = ProxyFacts(heartbeat=self.heartbeat, fallback=fallback)
        self.draining = draining  # read at every /readyz: a shutdown shows at once
        self.warnings: dict[str, str] = {}  # kind -> sentence (azsidecar/placement_check.py); ready all the same

    def _failed_probe(self, probe: Probe) -> None:
        self.facts = dataclasses.replace(self.facts, upstream=probe)

    def checks(self) -> dict[str, Check]:
        facts = self.facts
        if self.draining() and not facts.draining:
            facts = ProxyFacts(facts.heartbeat, True, facts.upstream, facts.agents, facts.circuits, facts.fallback,
                               facts.circuit_reasons)
        checks = assess_proxy(facts, time.monotonic())
        checks.update({f"warning:{kind}": Check(True, text) for kind, text in self.warnings.items()})
        return checks


class AgentHealth(_StartupWait):
    def __init__(self) -> None:
        self.heartbeat = time.monotonic()
        self.facts = AgentFacts(heartbeat=self.heartbeat)

    def _failed_probe(self, probe: Probe) -> None:
        self.facts = dataclasses.replace(self.facts, brokers=probe)

    def checks(self) -> dict[str, Check]:
        return assess_agent(self.facts, time.monotonic())


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


async def _trio_probe(what: Callable[[], Awaitable[object]]) -> Probe:
    try:
        with trio.fail_after(PROBE_TIMEOUT_S):
            await what()
    except trio.TooSlowError:
        return Probe(False, f"no answer within {PROBE_TIMEOUT_S:.0f} s", time.monotonic())
    except Exception as exc:  # noqa: BLE001 - any failure is the probe's answer
        return Probe(False, f"{type(exc).__name__}: {exc}", time.monotonic())
    return Probe(True, "answered", time.monotonic())


async def _connect_and_close(address: str) -> None:
    host, port = _host_port(address)
    stream = await trio.open_tcp_stream(host, port)
    await stream.aclose()


def probe_signal(exc: BaseException) -> Signal:
    """What a failed TCP probe of an agent says (router/zone_health.py): a refusal or reset
    means the host answered without an agent; a timeout or no route means nothing answered."""
    if isinstance(exc, trio.TooSlowError):
        return Signal.NO_ANSWER
    # trio's "all attempts to connect ... failed" carries each attempt's error in a group as its cause.
    pending: list[BaseException] = [exc]
    while pending:
        seen = pending.pop()
        if isinstance(seen, (ConnectionRefusedError, ConnectionResetError)) or \
                getattr(seen, "errno", None) in (errno.ECONNREFUSED, errno.ECONNRESET):
            return Signal.REFUSED
        if isinstance(seen, BaseExceptionGroup):
            pending.extend(seen.exceptions)
        pending.extend(e for e in (seen.__cause__, seen.__context__) if e is not None)
    return Signal.NO_ANSWER


async def _probe_agent(into: dict[str, Probe], signals: dict[str, Signal], zone: str, address: str) -> None:
    try:
        with trio.fail_after(PROBE_TIMEOUT_S):
            await _connect_and_close(address)
    except (trio.TooSlowError, OSError) as exc:
        signals[zone] = probe_signal(exc)
        detail = f"no answer within {PROBE_TIMEOUT_S:.0f} s" if isinstance(exc, trio.TooSlowError) \
            else f"{type(exc).__name__}: {exc}"
        into[zone] = Probe(False, f"{detail} ({signals[zone].value})", time.monotonic())
        return
    into[zone] = Probe(True, "answered", time.monotonic())


async def monitor_proxy(health: ProxyHealth, upstream_probe: Callable[[], Awaitable[None]],
                        agents: Mapping[str, str], circuits: Callable[[], Mapping[str, str]],
                        reasons: Callable[[], Mapping[str, str]] = dict,
                        report: Callable[[str, Signal, str], None] | None = None) -> None:
    """Runs until cancelled: heartbeat every HEARTBEAT_S, facts every PROBE_INTERVAL_S.
    A failed agent probe is reported to the router as a signal about that zone (`report`)."""

    async def heartbeat() -> None:
        while True:
            health.heartbeat = time.monotonic()
            await trio.sleep(HEARTBEAT_S)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(heartbeat)
        while True:
            upstream = await _trio_probe(upstream_probe)
            probes: dict[str, Probe] = {}
            signals: dict[str, Signal] = {}
            async with trio.open_nursery() as each:
                for zone, address in agents.items():
                    each.start_soon(_probe_agent, probes, signals, zone, address)
            if report is not None:
                for zone in sorted(probes):
                    signal = signals.get(zone, Signal.REACHABLE)
                    report(zone, signal, f"agent probe: {probes[zone].detail}")
            health.facts = ProxyFacts(time.monotonic(), health.draining(), upstream, probes, dict(circuits()),
                                      health.facts.fallback, dict(reasons()))
            READY.labels("proxy").set(1.0 if ready(health.checks()) else 0.0)
            await trio.sleep(PROBE_INTERVAL_S)


async def monitor_agent(health: AgentHealth, brokers_probe: Callable[[], Awaitable[None]],
                        draining: Callable[[], bool]) -> None:
    """The agent's monitor on its asyncio loop; runs until cancelled."""

    async def heartbeat() -> None:
        while True:
            health.heartbeat = time.monotonic()
            await asyncio.sleep(HEARTBEAT_S)

    async def probing() -> None:
        while True:
            try:
                await asyncio.wait_for(brokers_probe(), PROBE_TIMEOUT_S)
                probe = Probe(True, "answered", time.monotonic())
            except TimeoutError:
                probe = Probe(False, f"no answer within {PROBE_TIMEOUT_S:.0f} s", time.monotonic())
            except Exception as exc:  # noqa: BLE001 - any failure is the probe's answer
                probe = Probe(False, f"{type(exc).__name__}: {exc}", time.monotonic())
            health.facts = AgentFacts(time.monotonic(), draining(), probe)
            READY.labels("agent").set(1.0 if ready(health.checks()) else 0.0)
            await asyncio.sleep(PROBE_INTERVAL_S)

    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(heartbeat())
        tasks.create_task(probing())
