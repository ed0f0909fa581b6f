"""Fakes of the WAL writer and the notification sender wired to the router as
azsidecar/sidecar.py wires the real ones (there, by constructor arguments)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from router.wal_path import ObjectAnnouncer, WalPath
from router.zone_circuits import ZoneCircuits


def wal_route(writer: Any, sender: Any, nursery: trio.Nursery,
              acked_topic: Callable[[str], bool] | None = None) -> tuple[WalPath, ZoneCircuits]:
    """(the WAL path, the circuits its gray failures reach): `writer`'s released objects go to
    the announcer, its objects are laid out by `sender.agents`, and both report gray failures
    to the circuits."""
    circuits = ZoneCircuits(sender.agents, {})
    announcer = ObjectAnnouncer(sender, nursery, acked_topic)
    writer.on_released = announcer.announce
    writer.share_of = sender.agents.share_of
    writer.on_gray_put = circuits.put_abandoned
    sender.on_gray = circuits.notify_abandoned
    return WalPath(writer, announcer, sender.agents), circuits
