"""Process-wide runtime settings for the long-running azsidecar processes.

Why tune the cyclic garbage collector: a busy proxy or agent keeps thousands of trio tasks
suspended (one per in-flight batch), each holding frames, entries and events. With
CPython's default thresholds (700, 10, 10) a young collection runs every 700 container
allocations and every tenth one walks the middle generation full of those long-lived
tasks. In bench/bench_wal.py that was ~10 % of the writer process's CPU (1.77 -> 1.55
CPU-s per 512 MiB when raised). Reference counting still frees almost everything at
once; the collector only finds cycles, which the raised thresholds reclaim a little later
(50,000 young objects of a few hundred bytes: a few MB at most).
"""

from __future__ import annotations

import gc

GC_THRESHOLDS = (50_000, 20, 10)


def tune_gc() -> None:
    """Raise the collector's thresholds and freeze what startup allocated (imports, config).

    Frozen objects are never scanned again; they live for the whole process anyway.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
