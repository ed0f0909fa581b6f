"""The proxy's monitor (trio): collects the facts /livez and /readyz answer from.

Every PROBE_INTERVAL_S it asks the upstream cluster for Metadata, opens a TCP connection to
each other zone's agent and reads the router's circuits; a heartbeat task records that the
loop turns. The facts go to the process's ProxyHealth (azsidecar/health.py).
"""

from __future__ import annotations

import errno
import time
from collections.abc import Awaitable, Callable, Mapping

import trio

from azsidecar.health import HEARTBEAT_S, PROBE_TIMEOUT_S, READY, ProxyHealth
from azsidecar.readiness import PROBE_INTERVAL_S, Probe, ProxyFacts, ready
from router.zone_health import Signal


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
