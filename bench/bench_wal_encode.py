"""The WAL encoder's CPU per MiB, from two source trees side by side, with the PUT's checksum.

Strategy: each sealed WAL object is encoded once and PUT with a checksum header S3 verifies.
Until 2026-12-02 that header was a CRC-32 (IEEE), one more pass over the encoded object after
the encoder's own copy and CRC-32C passes; since then it is the encoder's CRC-32C, continued
over the trailer (`EncodedObject.crc32c`). So this bench times, per tree, what a sealed
object costs before its PUT leaves: `encode_object` into a reused buffer, plus zlib's
CRC-32 of the result where the tree's encoder gives no checksum. Each tree's
`wal_s3/format.py` is loaded from its own file (it needs only the standard library and
crc32c), so both run in this one process, in alternating order, on the same batches.

Between encodes the core's caches are flushed (64 MiB written), as for a proxy whose batches
arrived some milliseconds earlier and whose object is several MiB: what matters is passes
over memory. CPU is this thread's (time.thread_time).

Usage:
  .venv/bin/python bench/bench_wal_encode.py --trees /tmp/before,. [--rounds 12]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
import zlib
from pathlib import Path
from types import ModuleType

MiB = 1024 * 1024
SHAPES = ((4, MiB), (64, 64 * 1024), (256, 16 * 1024))  # (batches, bytes each): 4 MiB objects
FLUSH_BYTES = 64 * MiB


def load_format(tree: Path, name: str) -> ModuleType:
    """`wal_s3/format.py` of `tree` as a module of its own."""
    path = tree / "wal_s3" / "format.py"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"no WAL encoder at {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def encode_for_put(fmt: ModuleType, entries: list, spare: bytearray, sequence: int) -> int:
    """What one sealed object costs before its PUT: the encoding and the PUT's checksum."""
    encoded = fmt.encode_object(writer_id="bench", epoch=1, sequence=sequence, created_ms=0,
                                entries_by_zone={"use1-az2": entries}, into=spare)
    crc = getattr(encoded, "crc32c", None)
    if crc is None:  # an encoder that gives no checksum: the transport's zlib pass
        crc = zlib.crc32(encoded.data)
    return int(crc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", required=True, help="two checkouts, the first the baseline")
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args(argv)
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    if len(trees) != 2 or args.rounds < 1:
        parser.error("--trees: two checkouts; --rounds: at least 1")
    formats = [load_format(t, f"wal_format_{i}") for i, t in enumerate(trees)]
    flush_area = bytearray(FLUSH_BYTES)
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    for count, size in SHAPES:
        spares = [bytearray(), bytearray()]
        times: list[list[float]] = [[], []]
        for r in range(args.rounds):
            batches = [os.urandom(size) for _ in range(count)]
            order = (0, 1) if r % 2 == 0 else (1, 0)
            for i in order:
                fmt = formats[i]
                entries = [fmt.WalEntry("orders", p % 6, 7, 0, p, 16, memoryview(b)) for p, b in enumerate(batches)]
                flush_area[::4096] = bytes(len(range(0, FLUSH_BYTES, 4096)))  # evict the batches from cache
                flush_area[:] = bytes(FLUSH_BYTES)
                started = time.thread_time()
                encode_for_put(fmt, entries, spares[i], r)
                times[i].append(time.thread_time() - started)
        mib = count * size / MiB
        per_mib = [statistics.median(t) * 1000 / mib for t in times]
        print(f"{count} batches of {size // 1024} KiB: " + ", ".join(
            f"{tree}: {ms:.3f} ms per MiB" for tree, ms in zip(trees, per_mib, strict=True))
            + f"; {per_mib[1] / per_mib[0]:.3f}x the first")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
