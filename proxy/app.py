"""Wires the sidecar together from the one Config: upstream, produce backend, listener.

Until the router is configured with other zones, every partition takes the direct path.
"""

from __future__ import annotations

import trio

from azsidecar.config import Config
from proxy.server import run_proxy


async def run_sidecar(config: Config, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run the proxy; `task_status.started((server, port))` once it listens."""
    await run_proxy(config.proxy, config.upstream, None, task_status=task_status)
