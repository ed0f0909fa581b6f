"""leader_notify: the cross-zone notification protocol, the proxy's sender, the zone agent.

Public surface:
- `protocol`: sans-IO frames, messages, HMAC keyring, replay guard (docs/notify-protocol.md).
- `NotifySender` / `NotifyError` (trio, in the proxy): `await sender.notify(flushed, dest_zone)`.
- `Agent` (asyncio) and `running_agent(config, zone, keys, audit=...)`; `azsidecar agent` runs it.
Imports are lazy so the proxy (trio) does not import aiokafka and the agent does not import trio
code it does not use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Agent", "EntryResult", "NotifyError", "NotifySender", "running_agent"]


def __getattr__(name: str) -> Any:
    if name in ("NotifySender", "NotifyError"):
        from leader_notify import sender

        return getattr(sender, name)
    if name == "EntryResult":
        from leader_notify.protocol import EntryResult

        return EntryResult
    if name == "Agent":
        from leader_notify.agent import Agent

        return Agent
    if name == "running_agent":
        from leader_notify._run import running_agent

        return running_agent
    raise AttributeError(f"module 'leader_notify' has no attribute {name!r}")
