"""CPU per ranged GET through wal_s3's S3Http (the agent's read path), small and large ranges side by side.

Run:  .venv/bin/python bench/bench_s3_get.py [--gets 100] [--sizes-kib 1,2730,8192]

Setup: one moto server on loopback, one 8 MiB object. In this process, on asyncio as in
the agent, `S3Http.get_range` (SigV4 signing, one HTTP/1.1 exchange, anyio streams) is
timed with the process's CPU clock for `gets` GETs of each range size, one after another;
then a bare TCP connect and close to the same server (anyio.connect_tcp), which every GET
pays here because moto closes each connection (S3 keeps them alive).

Prints CPU ms per GET for each size, the fixed part (the smallest range's GET) and the
per-MiB part (the slope between the two largest sizes), and the connect's share of the
fixed part. Why: an agent pays one GET per object share, so this fixed part is what more,
smaller shares cost (docs/benchmarks.md, "Several agents per zone").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio  # noqa: E402

from azsidecar.config import load_config  # noqa: E402
from deploy.local.processes import DUMMY_CREDENTIALS, start_moto  # noqa: E402
from wal_s3._s3_http import http_transport  # noqa: E402
from wal_s3.s3 import make_s3_client  # noqa: E402

MiB = 1024 * 1024
OBJECT_BYTES = 8 * MiB
BUCKET, KEY = "bench-s3-get", "object"


async def cpu_per_get_ms(http, size: int, gets: int) -> float:
    await http.get_range(KEY, 0, size)  # the first one outside the clock
    started = time.process_time()
    for _ in range(gets):
        data = await http.get_range(KEY, 0, size)
        if len(data) != size:
            raise RuntimeError(f"GET of {size} bytes returned {len(data)}")
    return (time.process_time() - started) / gets * 1000


async def cpu_per_connect_ms(host: str, port: int, count: int) -> float:
    started = time.process_time()
    for _ in range(count):
        stream = await anyio.connect_tcp(host, port)
        await stream.aclose()
    return (time.process_time() - started) / count * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gets", type=int, default=100)
    ap.add_argument("--sizes-kib", default="1,2730,8192", help="range sizes, at most 8192 KiB")
    args = ap.parse_args()
    sizes = sorted(int(kib) * 1024 for kib in args.sizes_kib.split(","))
    if args.gets < 1 or len(sizes) < 2 or sizes[0] < 1 or sizes[-1] > OBJECT_BYTES:
        ap.error("--gets: at least 1; --sizes-kib: at least two sizes in 1..8192")
    os.environ.update(DUMMY_CREDENTIALS)
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with start_moto() as moto:
        moto.create_bucket(BUCKET)
        moto.client().put_object(Bucket=BUCKET, Key=KEY, Body=os.urandom(OBJECT_BYTES))
        config = load_config(None, {"wal.bucket": BUCKET, "wal.region": "us-east-1", "wal.endpoint_url": moto.endpoint_url}).wal
        http = http_transport(make_s3_client(config), config)
        if http is None:
            raise RuntimeError("wal_s3 chose botocore for this endpoint: nothing to measure")
        host, port = moto.endpoint_url.split("//", 1)[1].rsplit(":", 1)

        async def run() -> tuple[dict[int, float], float]:
            try:
                per_get = {size: await cpu_per_get_ms(http, size, args.gets) for size in sizes}
                return per_get, await cpu_per_connect_ms(host, int(port), args.gets)
            finally:
                await http.aclose()

        per_get, connect_ms = asyncio.run(run())
    for size, ms in per_get.items():
        print(f"GET of {size / 1024:8.0f} KiB: {ms:7.3f} ms CPU")
    fixed = per_get[sizes[0]]
    slope = (per_get[sizes[-1]] - per_get[sizes[-2]]) / ((sizes[-1] - sizes[-2]) / MiB)
    print(f"fixed part (smallest GET): {fixed:.3f} ms; per MiB beyond: {slope:.3f} ms")
    print(f"TCP connect + close: {connect_ms:.3f} ms CPU, {connect_ms / fixed:.2f} of the fixed part")
    return 0


if __name__ == "__main__":
    sys.exit(main())
