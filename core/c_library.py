"""Functions of the C library, looked up once, for the few process-wide settings Python has
no API for (glibc's allocator). None where the platform's C library lacks them (musl, macOS):
callers then go without the setting."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable


@functools.cache
def _libc() -> ctypes.CDLL | None:
    # The process's own symbols, the C library's among them: no search by name, which
    # (ctypes.util.find_library) runs `ldconfig -p` in a child process on Linux.
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def libc_function(name: str) -> Callable[..., int] | None:
    """The C library's function `name`, or None when there is no such function."""
    lib = _libc()
    function: Callable[..., int] | None = getattr(lib, name, None) if lib is not None else None
    return function
