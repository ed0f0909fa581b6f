"""glibc's allocator settings of the long-running processes (azsidecar/runtime.py): a buffer of
a Produce request's size is served from the heap, so allocating it again costs no new pages.

Measured in fresh interpreters (the settings are process-wide): 200 buffers of 0.93-1.0 MB,
each freed after the next two, as a proxy receives and forwards requests. Page faults
counted with getrusage; the untuned process is the control that shows the test can fail.
"""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                                reason="mallopt settings are glibc's")

RECEIVE_LIKE_A_PROXY = """
import random, resource, sys
if sys.argv[1] == "tuned":
    from azsidecar.runtime import tune_allocator
    assert tune_allocator()
rng = random.Random(7)
sizes = [rng.randint(930_000, 1_000_000) for _ in range(200)]
held = []
for size in sizes[:20]:  # warm: the heap reaches its working size
    held.append(bytearray(size)); held = held[-2:]
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for size in sizes:
    held.append(bytearray(size)); held = held[-2:]
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / len(sizes))
"""


def faults_per_buffer(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", RECEIVE_LIKE_A_PROXY, mode], capture_output=True, text=True,
                         timeout=60, check=True)
    return float(out.stdout)


def test_request_sized_buffers_reuse_heap_pages_once_tuned():
    untuned, tuned = faults_per_buffer("default"), faults_per_buffer("tuned")
    # A fresh 1 MB mapping faults in tens of pages (256 of 4 KiB, fewer with fault-around);
    # reused heap pages fault in none.
    assert untuned >= 10, f"control: the default allocator faulted only {untuned} pages per buffer"
    assert tuned < 2, f"tuned: {tuned} page faults per buffer"
