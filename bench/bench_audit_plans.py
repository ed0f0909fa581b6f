"""The audit's jobs as shipped and with one of two plan-building costs put back, side by side.

    python bench/bench_audit_plans.py --batches 20000 100000000 --jobs savings report --rounds 2
    python bench/bench_audit_plans.py --compare call_sites --batches 20000 --rounds 2

In local mode `spark_audit._io.keep` checkpoints the rollup, so the frames the tables are
built on start from a leaf over the kept rows; before, the rollup was cached and every
table's plan held the plan that read, parsed and grouped the input, which Spark analyses
again under each step a table takes. One started local[*] SparkSession runs each job on
each input twice per round, once as shipped and once with the rollup cached
(`rolled.persist(MEMORY_AND_DISK)`, the earlier `keep`), alternating which goes first.
`--compare call_sites`: the other side has PySpark record the Python call site of every
DataFrame and Column call in the JVM (PySpark 4's default, spark_audit._io.NO_CALL_SITES
turns it off), the rollup checkpointed on both.
Printed per job and input: the median wall time and CPU seconds (user + system of the JVM,
from /proc, and of this Python process) of each side and the ratio shipped / other. A warm-up report on the smallest
input comes first. Inputs are the audit of `--batches` produce batches in its default form
(bench/gen_audit_records.py --form summary), generated once into --data (the same
directories as bench/bench_audit.py --form summary).
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyspark.errors.utils as pyspark_errors  # noqa: E402
from pyspark import StorageLevel  # noqa: E402

from bench.bench_audit import jvm_cpu_s  # noqa: E402
from bench.gen_audit_records import generate  # noqa: E402
from core.prices import Prices  # noqa: E402
from spark_audit import _io  # noqa: E402
from spark_audit._io import spark_session  # noqa: E402
from spark_audit.run import run  # noqa: E402

SHIPPED = _io.keep
OTHER_SIDE = {"keep": "cached", "call_sites": "call sites"}


def python_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


def cached(_spark, rolled):
    """The rollup as it was kept before: cached, its whole plan under every table."""
    return rolled.persist(StorageLevel.MEMORY_AND_DISK)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[20_000, 100_000_000])
    parser.add_argument("--jobs", nargs="+", default=["savings", "report"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--compare", choices=sorted(OTHER_SIDE), default="keep")
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "azsidecar-audit-bench")
    args = parser.parse_args()

    inputs = {}
    for n in args.batches:
        path = args.data / f"{n}-batches-summary-v15"
        if not path.exists():
            t0 = time.monotonic()
            written = generate(n, path, form="summary", batches=n)
            print(f"generated {written:,} records in {path} ({time.monotonic() - t0:.1f} s)", flush=True)
        inputs[n] = path

    spark = spark_session("local[*]")
    samples: dict[tuple[str, int, str], list[tuple[float, float]]] = {}

    def timed(job: str, path: Path, side: str) -> tuple[float, float]:
        if side == "cached":
            _io.keep = cached
        # PySpark reads the setting once per process into this cache (spark_audit._io)
        pyspark_errors._enable_debugging_cache = side == "call sites"  # noqa: SLF001
        out_dir = Path(tempfile.mkdtemp(prefix="audit-plans-out-"))
        try:
            t0, c0, p0 = time.monotonic(), jvm_cpu_s(spark), python_cpu_s()
            code = run(job, str(path), str(out_dir), Prices(), spark=spark, out=io.StringIO(),
                       progress=io.StringIO())
            wall, used = time.monotonic() - t0, jvm_cpu_s(spark) - c0 + python_cpu_s() - p0
        finally:
            _io.keep = SHIPPED
            pyspark_errors._enable_debugging_cache = False  # noqa: SLF001
            shutil.rmtree(out_dir, ignore_errors=True)
        if code != 0:
            raise SystemExit(f"{job} on {path} failed with exit code {code}")
        return wall, used

    other = OTHER_SIDE[args.compare]
    try:
        timed("report", inputs[min(inputs)], "shipped")  # warm-up: JIT and class loading are not data
        for round_no in range(args.rounds):
            for n, path in inputs.items():
                for job in args.jobs:
                    sides = ["shipped", other]
                    for side in sides if round_no % 2 == 0 else sides[::-1]:
                        wall, used = timed(job, path, side)
                        samples.setdefault((job, n, side), []).append((wall, used))
                        print(f"round {round_no + 1}  {job:8s} {n:>12,} batches  {side:10s} "
                              f"{wall:6.1f} s wall {used:6.1f} s CPU", flush=True)
    finally:
        spark.stop()

    print()
    print(f"{'job':8s} {'batches':>12s}  {'shipped wall / CPU':>20s}  {other + ' wall / CPU':>22s}  ratio wall  ratio CPU")
    for n in inputs:
        for job in args.jobs:
            med = {side: (statistics.median(w for w, _ in samples[(job, n, side)]),
                          statistics.median(c for _, c in samples[(job, n, side)]))
                   for side in ("shipped", other)}
            (sw, sc), (ow, oc) = med["shipped"], med[other]
            print(f"{job:8s} {n:>12,}  {sw:8.1f} s / {sc:6.1f} s  {ow:10.1f} s / {oc:6.1f} s"
                  f"  {sw / ow:9.3f}x  {sc / oc:8.3f}x")


if __name__ == "__main__":
    main()
