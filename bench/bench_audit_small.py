"""An audit job over a small input, with and without the small-input session settings, side by side.

    python bench/bench_audit_small.py --batches 20000 --jobs savings all --rounds 2
    python bench/bench_audit_small.py --input <a demo run's audit/> --jobs savings all --rounds 2

`azsidecar audit` on a local input under spark_audit._io.QUICK_JIT_MAX_INPUT_BYTES starts its
session with SMALL_INPUT_CONFIGS (no whole-stage code generation, no adaptive execution, two
shuffle partitions). Each round runs every job twice, each in a fresh Python process and JVM
as a user's command would, once as shipped and once with those settings put back to Spark's
defaults, alternating which goes first. Printed per job: the JVM's CPU seconds (user +
system, from the child's rusage), the wall time, and the ratio shipped / Spark's defaults.
The input is the audit of `--batches` produce batches in its default form
(bench/gen_audit_records.py --form summary), generated once into --data, or `--input`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.gen_audit_records import generate  # noqa: E402

SPARK_DEFAULTS = {"spark.sql.codegen.wholeStage": "true", "spark.sql.adaptive.enabled": "true",
                  "spark.sql.shuffle.partitions": "8"}  # 8: what every local session had before

# Runs in the child: the job through spark_audit.run.run, as `azsidecar audit` runs it, with
# `overrides` laid over the session the product builds.
CHILD = r"""
import io, json, resource, shutil, sys, time
from pyspark.sql import SparkSession
job, input_dir, output_dir, overrides = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
build = SparkSession.Builder.getOrCreate
def with_overrides(builder):
    for key, value in overrides.items():
        builder = builder.config(key, value)
    return build(builder)
SparkSession.Builder.getOrCreate = with_overrides
from core.prices import Prices
from spark_audit.run import run
shutil.rmtree(output_dir, ignore_errors=True)
started = time.monotonic()
code = run(job, input_dir, output_dir, Prices(), out=io.StringIO(), progress=io.StringIO())
wall = time.monotonic() - started
jvm = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"code": code, "wall_s": wall, "jvm_cpu_s": jvm.ru_utime + jvm.ru_stime}))
"""


def run_job(job: str, input_dir: Path, output_dir: Path, overrides: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, job, str(input_dir), str(output_dir), json.dumps(overrides)],
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=600, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{job} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    result = json.loads(lines[-1])
    if result["code"] != 0:
        raise SystemExit(f"{job} exited {result['code']}: {proc.stderr[-2000:]}")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20_000)
    parser.add_argument("--jobs", nargs="+", default=["savings", "all"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "azsidecar-audit-small")
    parser.add_argument("--input", type=Path, help="an audit directory to use instead (e.g. a demo run's audit/)")
    args = parser.parse_args()
    input_dir = args.input or args.data / f"{args.batches}-batches-summary"
    if not input_dir.exists():
        generate(0, input_dir, form="summary", batches=args.batches)
    size = sum(p.stat().st_size for p in input_dir.rglob("*") if p.is_file())
    what = str(input_dir) if args.input else f"the audit of {args.batches:,} produce batches"
    print(f"input: {what}, {size / 1024:.0f} KiB stored; load average {os.getloadavg()[0]:.2f}", flush=True)
    setups = {"shipped": {}, "spark defaults": SPARK_DEFAULTS}
    for job in args.jobs:
        figures: dict[str, list[dict]] = {name: [] for name in setups}
        for round_no in range(args.rounds):
            order = list(setups) if round_no % 2 == 0 else list(reversed(setups))
            for name in order:
                figures[name].append(run_job(job, input_dir, args.data / "out", setups[name]))
        cpu = {name: statistics.median(r["jvm_cpu_s"] for r in runs) for name, runs in figures.items()}
        wall = {name: statistics.median(r["wall_s"] for r in runs) for name, runs in figures.items()}
        print(f"{job:8s} shipped {cpu['shipped']:6.1f} JVM CPU-s, {wall['shipped']:5.1f} s | Spark's defaults "
              f"{cpu['spark defaults']:6.1f} CPU-s, {wall['spark defaults']:5.1f} s | CPU ratio "
              f"{cpu['shipped'] / cpu['spark defaults']:.3f} (medians of {args.rounds})", flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
