"""glibc's allocator settings of the long-running processes (azsidecar/runtime.py): a buffer of
a Produce request's size is served from the heap, so allocating it again costs no new pages;
in the agent, so is a WAL range of several MiB read into its block cache.

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


def faults_per_block(script: str, mode: str) -> float:
    """Page faults per block allocated by `script` in a fresh interpreter, set up as `mode`."""
    out = subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True,
                         timeout=60, check=True)
    return float(out.stdout)


def test_request_sized_buffers_reuse_heap_pages_once_tuned():
    untuned, tuned = faults_per_block(RECEIVE_LIKE_A_PROXY, "default"), faults_per_block(RECEIVE_LIKE_A_PROXY, "tuned")
    # A fresh 1 MB mapping faults in tens of pages (256 of 4 KiB, fewer with fault-around);
    # reused heap pages fault in none.
    assert untuned >= 10, f"control: the default allocator faulted only {untuned} pages per buffer"
    assert tuned < 2, f"tuned: {tuned} page faults per buffer"


# As the agent's block cache: ranges of 3-8 MiB (an object's share) read one after another
# into an LRU bounded at 64 MiB, the oldest evicted first. "proxy" is the setting every
# other command runs with (blocks of 2 MiB or more get a mapping of their own), the control.
READ_LIKE_AN_AGENT = """
import collections, random, resource, sys
from azsidecar.runtime import tune_allocator
assert tune_allocator(agent=sys.argv[1] == "agent")
rng = random.Random(11)
sizes = [rng.randint(3 * 2**20, 8 * 2**20) for _ in range(120)]
cache, cached = collections.deque(), 0
def read(size):
    global cached
    block = b"".join([b"x" * (size // 2), b"y" * (size - size // 2)])  # as the GET joins its pieces
    cache.append(block); cached += size
    while cached > 64 * 2**20:
        cached -= len(cache.popleft())
for size in sizes[:40]:  # warm: the cache fills and starts evicting
    read(size)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for size in sizes[40:]:
    read(size)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / len(sizes[40:]))
"""


def test_the_agents_cached_wal_ranges_reuse_heap_pages():
    proxy_setting, agent_setting = faults_per_block(READ_LIKE_AN_AGENT, "proxy"), faults_per_block(READ_LIKE_AN_AGENT, "agent")
    # A fresh mapping of 3-8 MiB faults in hundreds of pages (768-2,048 of 4 KiB; a few with
    # transparent huge pages); ranges evicted oldest first leave heap the next one reuses.
    assert proxy_setting >= 100, f"control: the proxy's setting faulted only {proxy_setting} pages per range"
    assert agent_setting < 20, f"agent: {agent_setting} page faults per range"
