"""Time each audit job at two input sizes in one run and print how time grows.

    python bench/bench_audit.py --sizes 1000000 10000000 --data /tmp/audit-bench

Inputs are made by bench/gen_audit_records.py (generated once into --data/<n>, reused on
later runs). Every job runs end to end through `spark_audit.run.run` (read with the
union schema, count and cache, compute its tables, write CSV/HTML) in one local[*]
SparkSession that is started once: JVM start-up (~10 s) is not in the job times.
A warm-up run on the smallest input comes first (JIT and class loading are not data).
Besides wall time the JVM's CPU seconds are printed (from /proc, Linux): on a shared
machine wall time depends on the neighbours, CPU time much less.
Growth = time at the larger size / time at the smaller; 10x data -> 10.0 is linear.

`--form summary`: each size is a number of produce batches, audited as the proxies and agents
write them by default (produce and WAL-path summaries per interval and key, audit v15;
gen_audit_records.py --form summary), generated into --data/<n>-batches-summary-v15. The
savings job over the audit of 100 M produced batches (goal: within 60 s):

    python bench/bench_audit.py --form summary --sizes 10000000 100000000 --jobs savings
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gen_audit_records import generate  # noqa: E402
from core.prices import Prices  # noqa: E402
from spark_audit._io import spark_session  # noqa: E402
from spark_audit.run import run  # noqa: E402

JOBS = ("savings", "cache", "latency", "report")


def jvm_cpu_s(spark) -> float:
    """User + system CPU seconds of the driver JVM (local mode: all of Spark)."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()  # noqa: SLF001
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "azsidecar-audit-bench")
    parser.add_argument("--jobs", nargs="+", default=list(JOBS), choices=JOBS)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--form", choices=("batch", "summary"), default="batch",
                        help="summary: sizes are produce batches, audited as per-interval summaries")
    args = parser.parse_args()

    inputs = {}
    for n in args.sizes:
        path = args.data / (str(n) if args.form == "batch" else f"{n}-batches-summary-v15")
        if not path.exists():
            t0 = time.monotonic()
            written = generate(n, path, form=args.form, batches=n)
            print(f"generated {written:,} records in {path} ({time.monotonic() - t0:.1f} s)", flush=True)
        inputs[n] = path

    spark = spark_session(args.master)
    times: dict[tuple[str, int], float] = {}
    cpu: dict[tuple[str, int], float] = {}

    def timed(job: str, path: Path) -> tuple[float, float]:
        out_dir = Path(tempfile.mkdtemp(prefix="audit-bench-out-"))
        t0, c0 = time.monotonic(), jvm_cpu_s(spark)
        code = run(job, str(path), str(out_dir), Prices(), spark=spark, out=io.StringIO())
        wall, used = time.monotonic() - t0, jvm_cpu_s(spark) - c0
        shutil.rmtree(out_dir, ignore_errors=True)
        if code != 0:
            raise SystemExit(f"{job} on {path} failed with exit code {code}")
        return wall, used

    try:
        timed("report", inputs[min(inputs)])  # warm-up
        for n, path in inputs.items():
            for job in args.jobs:
                times[(job, n)], cpu[(job, n)] = timed(job, path)
                unit = "records" if args.form == "batch" else "batches"
                print(f"{job:8s} {n:>12,} {unit}  {times[(job, n)]:7.1f} s wall  {cpu[(job, n)]:7.1f} s JVM CPU",
                      flush=True)
    finally:
        spark.stop()

    sizes = list(inputs)
    print()
    header = f"{'job':8s}" + "".join(f"{n:>14,}" for n in sizes)
    if len(sizes) > 1:
        header += f"   growth {sizes[-1] // sizes[0]}x data"
    print(header)
    for label, table in (("wall", times), ("JVM CPU", cpu)):
        print(f"{label} seconds")
        for job in args.jobs:
            line = f"{job:8s}" + "".join(f"{table[(job, n)]:13.1f}s" for n in sizes)
            if len(sizes) > 1:
                line += f"   {table[(job, sizes[-1])] / table[(job, sizes[0])]:.2f}x"
            print(line)


if __name__ == "__main__":
    main()
