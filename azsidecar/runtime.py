"""Process-wide runtime settings for the long-running azsidecar processes.

Why tune the cyclic garbage collector: a busy proxy or agent keeps thousands of trio tasks
suspended (one per in-flight batch), each holding frames, entries and events. With
CPython's default thresholds (700, 10, 10) a young collection runs every 700 container
allocations and every tenth one walks the middle generation full of those long-lived
tasks. In bench/bench_wal.py that was ~10 % of the writer process's CPU (1.77 -> 1.55
CPU-s per 512 MiB when raised). Reference counting still frees almost everything at
once; the collector only finds cycles, which the raised thresholds reclaim a little later
(50,000 young objects of a few hundred bytes: a few MB at most).

Why tune glibc's allocator: a proxy receives each ~1 MB Produce request into a buffer of
its own and frees it once forwarded. By default glibc serves such a block with a fresh
memory mapping (its threshold adapts only up to the largest block freed so far, and
request sizes vary) and gives the top of its heap back to the OS once 2x that threshold is
free there, so nearly every request paid for new pages: measured, 69 page faults and ~300
µs of CPU per 1 MB buffer, against 0.6 and ~34 µs with the settings below (1 MB buffers
allocated and freed 2,000 times). Blocks below the codec's own mapping threshold
(kafka_protocol/kafka_codec.py, MAPPED_FRAME_MIN_BYTES) now come from the heap, and up to
HEAP_TOP_KEPT_BYTES of free heap stay mapped for the next requests. The proxy still gives
free memory back after a burst (proxy/memory.py).

The agent's large blocks are different: every GET of an object's share (up to `wal.max_bytes`,
8 MiB by default) is a block of its own that stays in the block cache (`wal.cache_bytes`)
until the oldest ranges are evicted. Above the proxy's 2 MiB limit each was a fresh mapping,
so the agent faulted in and the kernel zeroed a page for every 4 KiB it read from S3
(`perf`: two thirds of a busy agent's samples in the kernel's clear_page). The agent serves
blocks up to glibc's largest threshold (32 MiB) from the heap instead: evicted oldest first,
the freed ranges lie next to each other and serve the next GETs, and the heap's size stays
around the cache's bound plus the GETs in flight, which the cache holds anyway.
"""

from __future__ import annotations

import gc

from core.c_library import libc_function

GC_THRESHOLDS = (50_000, 20, 10)
# mallopt(3) parameters
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
HEAP_TOP_KEPT_BYTES = 16 * 1024 * 1024
# Blocks below this come from the heap: the codec's MAPPED_FRAME_MIN_BYTES (a test holds them
# equal; not imported, so every command does not pay for the protocol modules' import).
HEAP_BLOCK_MAX_BYTES = 2 * 1024 * 1024
# The agent's: glibc's upper bound for M_MMAP_THRESHOLD on 64-bit, and room at the heap's top
# for a few shares freed at once.
AGENT_HEAP_BLOCK_MAX_BYTES = 32 * 1024 * 1024
AGENT_HEAP_TOP_KEPT_BYTES = 64 * 1024 * 1024


def tune_gc() -> None:
    """Raise the collector's thresholds and freeze what startup allocated (imports, config).

    Frozen objects are never scanned again; they live for the whole process anyway.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def tune_allocator(*, agent: bool = False) -> bool:
    """Serve request-sized buffers (with `agent`, WAL ranges too) from glibc's heap and keep
    its top mapped (see above); False, changing nothing, where the C library has no mallopt."""
    mallopt = libc_function("mallopt")
    if mallopt is None:
        return False
    block, top = (AGENT_HEAP_BLOCK_MAX_BYTES, AGENT_HEAP_TOP_KEPT_BYTES) if agent else (
        HEAP_BLOCK_MAX_BYTES, HEAP_TOP_KEPT_BYTES)
    # mallopt returns 1 on success; a refused value leaves glibc's adaptive default
    return bool(mallopt(M_MMAP_THRESHOLD, block) and mallopt(M_TRIM_THRESHOLD, top))
