"""The upstream client's errors, in a module of their own: code that only classifies them (the
start-up checks of both processes) imports this, not the client with kafka-python behind it."""

from __future__ import annotations

from core.errors import SidecarError


class UpstreamError(SidecarError):
    """The upstream broker could not be reached or answered garbage (retriable)."""


class UpstreamTimeout(UpstreamError):
    """The upstream broker did not answer in time."""
