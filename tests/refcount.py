"""Checking that buffers are freed by reference counting alone, not by the cyclic collector.

The long-running processes raise the collector's thresholds (azsidecar/runtime.py), so a
reference cycle through a request's or a share's bytes (megabytes) keeps them for minutes:
an agent once held hundreds of MiB that way. Tests wrap batches in `WeakBuffer`s, run the
path with the collector off, and expect `still_alive` to be empty."""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Iterator, Sequence


class WeakBuffer(bytearray):
    """Bytes a test can hold a weak reference to (bytes cannot have one)."""


@contextlib.contextmanager
def collector_off() -> Iterator[None]:
    """The cyclic collector off inside (after one collection of what came before)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def still_alive(refs: Sequence[weakref.ref]) -> list:
    """The objects of `refs` something still holds."""
    return [ref() for ref in refs if ref() is not None]
