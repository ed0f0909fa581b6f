"""core/c_library.py: C functions found without starting a process."""

from __future__ import annotations

import platform

import pytest

from core import c_library


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt and malloc_trim are glibc's")
def test_glibc_functions_are_found_in_the_process_itself():
    # The unit tier refuses subprocesses (tests/unit/conftest.py): a lookup by library name
    # (ctypes.util.find_library runs `ldconfig -p`) would fail here, and did in whichever
    # unit test first started the CLI in a fresh worker.
    c_library._libc.cache_clear()
    assert c_library.libc_function("mallopt") is not None
    assert c_library.libc_function("malloc_trim") is not None
    assert c_library.libc_function("no_such_function_in_any_libc") is None
