"""wal_s3's WalReader and Checkpoints as the asyncio agent's zone reader and checkpoint hook.

Both run on anyio, so the agent calls them on its own asyncio loop: a read costs the GET
(on the event-loop transport) and nothing more, a checkpoint manifest one PUT in a worker
thread. wal_s3's errors stop here and become ZoneReadError / CheckpointFailed, the
agent's own exceptions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from core.errors import SidecarError
from wal_s3.format import WalEntry, WalFormatError
from wal_s3.gc import CheckpointError, Checkpoints
from wal_s3.reader import WalReader, WalReadError


class ZoneReadError(SidecarError):
    """The zone share could not be read or did not verify (the proxy may retry)."""


class CheckpointFailed(SidecarError):
    pass


class WalZoneReader:
    """The agent's ZoneReader: wal_s3.WalReader (block cache, retries, audit) on the agent's loop."""

    def __init__(self, wal_reader: WalReader) -> None:
        self._reader = wal_reader

    async def read_zone(self, key: str, zone_offset: int, zone_length: int, *, source_zone: str,
                        expected_entries: int | None) -> list[WalEntry]:
        """Entries of the range, CRCs verified. Raises ZoneReadError."""
        try:
            return await self._reader.read_zone(key, zone_offset, zone_length, source_zone=source_zone,
                                                expected_entries=expected_entries)
        except (WalReadError, WalFormatError, ValueError) as exc:
            raise ZoneReadError(f"{key} [{zone_offset}+{zone_length}]: {exc}") from exc


def wal_checkpoint(checkpoints: Checkpoints) -> Callable[[Sequence[str], str], Awaitable[None]]:
    """wal_s3 Checkpoints.mark_applied_many (one manifest PUT) as the agent's checkpoint hook."""

    async def checkpoint(keys: Sequence[str], zone: str) -> None:
        try:
            await checkpoints.mark_applied_many(list(keys), zone)
        except (CheckpointError, ValueError) as exc:
            raise CheckpointFailed(str(exc)) from exc

    return checkpoint
