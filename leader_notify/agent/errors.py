"""The agent's start-up error, in a module of its own: the shared start-up checks classify it
without importing the appender and aiokafka behind it (the proxy never appends)."""

from __future__ import annotations

from core.errors import SidecarError


class KafkaAppendUnavailable(SidecarError, RuntimeError):
    """The zone's cluster could not be reached at start-up."""
