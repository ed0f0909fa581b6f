"""The agent's monitor (asyncio): asks its zone's brokers every PROBE_INTERVAL_S and records
that the loop turns, into the process's AgentHealth (azsidecar/health.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from azsidecar.health import HEARTBEAT_S, PROBE_TIMEOUT_S, READY, AgentHealth
from azsidecar.readiness import PROBE_INTERVAL_S, AgentFacts, Probe, ready


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
