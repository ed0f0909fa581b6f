"""What the WAL writer raises: entries not made durable, or a writer fenced by a newer epoch.

A module of their own so that code which only recognises them (azsidecar/preflight.py, in
the agent too) does not load the writer and its trio machinery.
"""

from __future__ import annotations

from core.errors import SidecarError


class WalWriteError(SidecarError):
    """Entries could not be made durable. retriable=True: the caller may append them again."""


class WalFencedError(WalWriteError):
    """This writer's epoch is superseded (or was never won); it has stopped for good.

    The entries themselves may be retried through a new writer (new epoch).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=False)
