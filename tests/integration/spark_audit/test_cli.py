"""End to end: AuditWriter files -> job runner -> CSV/HTML/stdout; CLI errors; spark-submit; S3."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.configload import ConfigError
from core.prices import Prices
from core.prices_file import load_prices
from spark_audit._io import QUICK_JIT_JAVA_OPTIONS
from spark_audit.config import AuditConfig
from spark_audit.run import run
from spark_audit.writer import AuditWriter
from tests.integration.spark_audit.conftest import H0_MS, rec, write_jsonl

REPO = Path(__file__).resolve().parents[3]


def write_round_trip_records(output: str, endpoint_url: str | None = None) -> None:
    """A proxy in az1 sends two 1 MB batches to az2 through one WAL object; agent az2 reads it."""
    config = AuditConfig(output=output, s3_endpoint_url=endpoint_url)
    proxy = AuditWriter(config, zone="az1", component="proxy")
    agent = AuditWriter(config, zone="az2", component="agent")
    for partition in (0, 1):
        proxy.emit("produce_batch", {"ts_ms": H0_MS + partition, "leader_zone": "az2", "route": "wal",
                                     "bytes": 1_000_000, "records": 10, "wire_bytes": 0, "error_code": 0,
                                     "latency_ms": 30.0 + partition, "topic": "t", "partition": partition})
    proxy.emit("wal_flush", {"ts_ms": H0_MS + 2, "key": "k", "bytes": 2_000_100, "entries": 2, "zones": "az2",
                             "put_requests": 1, "ok": True})
    proxy.emit("notification", {"ts_ms": H0_MS + 3, "dest_zone": "az2", "key": "k", "entries": 2,
                                "request_bytes": 300, "response_bytes": 100})
    agent.emit("agent_read", {"ts_ms": H0_MS + 4, "source_zone": "az1", "key": "k", "gets": 1, "cache_hits": 1,
                              "cache_misses": 1, "bytes": 2_000_000, "bytes_from_cache": 0})
    # Generous: on a loaded machine boto3's first client and upload can take many seconds.
    assert proxy.close(timeout_s=120) and agent.close(timeout_s=120)


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def check_round_trip_savings(rows: list[dict[str, str]], net_savings_usd: object) -> None:
    (row,) = rows
    # On the wire at the default path MTU 9001 (MSS 8949, 52 header bytes per data packet, no
    # ACKs): direct equivalent = 2 * (1_000_000 + 41) = 2_000_082 payload
    # * (1 + 52/8949) = 2_000_082 + 11_621.89 -> 2_011_703; crossed = the notification
    # 300 + 100 + 4 packets * 52 = 608; avoided 2_011_095 bytes * 2e-11 = 4.02219e-5 $;
    # 1 PUT 5e-6 + 1 GET 4e-7 = 5.4e-6; net = 4.02219e-5 - 5.4e-6 = 3.48219e-5.
    assert (row["hour"], row["source_zone"], row["leader_zone"]) == ("2026-01-01T00:00Z", "az1", "az2")
    assert (int(row["batches_wal"]), int(row["bytes_wal"])) == (2, 2_000_000)
    assert int(row["direct_equivalent_bytes"]) == 2_011_703
    assert int(row["cross_bytes_avoided"]) == 2_011_095
    assert row["net_savings_usd"] == net_savings_usd


def test_round_trip_writer_to_report(spark, tmp_path):
    write_round_trip_records(str(tmp_path / "audit"))
    out = io.StringIO()
    assert run("report", str(tmp_path / "audit"), str(tmp_path / "out"), Prices(), spark=spark, out=out) == 0
    check_round_trip_savings(read_csv(tmp_path / "out" / "savings.csv"), "0.00003482")  # 4 significant digits
    # agent az2: 1 hit of 2 lookups.
    (cache,) = read_csv(tmp_path / "out" / "cache_agent.csv")
    assert (cache["zone"], float(cache["hit_rate"])) == ("az2", 0.5)
    (lat,) = read_csv(tmp_path / "out" / "latency.csv")
    assert (lat["route"], float(lat["p50_ms"]), float(lat["p99_ms"])) == ("wal", 30.0, 31.0)
    assert read_csv(tmp_path / "out" / "leader_traffic.csv")  # the placement section's input
    # No leader_move records: the last-apply table is empty (with its columns) and nothing is said of it.
    with (tmp_path / "out" / "last_apply.csv").open() as f:
        last_apply = csv.DictReader(f)
        assert list(last_apply) == [] and (last_apply.fieldnames or [])[:4] == [
            "plan_id", "applied_from_ms", "applied_to_ms", "window_ms"]
    html = (tmp_path / "out" / "report.html").read_text()
    assert html.count("src='data:image/png;base64,") >= 3
    summary = json.loads((tmp_path / "out" / "input_summary.json").read_text())
    assert summary["records_by_kind"] == {"produce_batch": 2, "wal_flush": 1, "notification": 1, "agent_read": 1}
    text = out.getvalue()
    # 3.48219e-5 before compute; the agent az2 over the 4 ms between the first and the last record:
    # 1 x 0.004 s / 3600 x $0.04937 = $5.486e-8; CPU 2 MB of WAL bytes / 2^30 x 5.39648 s/GiB = 0.010052 s
    # x $0.04048 / 3600 = $1.1303e-7; net 3.48219e-5 - 5.486e-8 - 1.1303e-7 = 3.465401e-5
    assert "NET SAVINGS $0.00003465 = " in text
    assert "projection  window too short to project (0.004 s < 1 h)" in text
    assert "last applied" not in text
    assert len(text.splitlines()) <= 24  # one screen


def test_tables_as_parquet_keep_values_and_types(spark, tmp_path):
    write_round_trip_records(str(tmp_path / "audit"))
    out = io.StringIO()
    assert run("savings", str(tmp_path / "audit"), str(tmp_path / "out"), Prices(), spark=spark, out=out,
               table_formats=("parquet",)) == 0
    # The savings job's tables and nothing of the report's (net_savings, topic_savings, report.html).
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "break_even.parquet", "input_summary.json", "savings.parquet", "writer_drops.parquet"]
    df = spark.read.parquet(str(tmp_path / "out" / "savings.parquet"))
    assert dict(df.dtypes)["bytes_wal"] == "bigint" and dict(df.dtypes)["net_savings_usd"] == "double"
    check_round_trip_savings([row.asDict() for row in df.collect()], pytest.approx(3.48219e-5, rel=1e-9))
    assert "savings.parquet" in out.getvalue()
    with pytest.raises(ValueError, match="unknown table format"):
        run("savings", str(tmp_path / "audit"), str(tmp_path / "out"), Prices(), spark=spark, table_formats=("xls",))


def test_job_reports_missing_input_with_exit_code(spark, tmp_path, capsys):
    assert run("savings", str(tmp_path / "nope"), str(tmp_path / "out"), Prices(), spark=spark) == 1
    assert "no such file or directory" in capsys.readouterr().err


def test_job_reports_corrupt_lines_on_stderr(spark, tmp_path, capsys):
    write_jsonl(tmp_path / "in" / "a.jsonl.gz", [rec("metadata_lookup", "az1", cache="hit")], ("garbage",))
    assert run("cache", str(tmp_path / "in"), str(tmp_path / "out"), Prices(), spark=spark) == 0
    assert "corrupt lines (not JSON, or a value of the wrong type): 1" in capsys.readouterr().err
    assert json.loads((tmp_path / "out" / "input_summary.json").read_text())["corrupt_lines"] == 1


def test_prices_file_forms(tmp_path):
    flat = tmp_path / "flat.toml"
    flat.write_text("s3_put_per_1000 = 0.0054\ncross_az_per_gb_each_way = 0.02\n")
    assert load_prices(str(flat)) == Prices(s3_put_per_1000=0.0054, cross_az_per_gb_each_way=0.02)
    full = tmp_path / "azsidecar.toml"
    full.write_text("[router.prices]\ns3_get_per_1000 = 0.001\n")
    assert load_prices(str(full)) == Prices(s3_get_per_1000=0.001)
    bad = tmp_path / "bad.toml"
    bad.write_text("[prices]\ns3_put_per_100 = 1\n")
    with pytest.raises(ConfigError, match="prices.s3_put_per_100: unknown setting"):
        load_prices(str(bad))
    assert load_prices(None) == Prices()


def test_cli_parses_audit_subcommand():
    from azsidecar.cli import build_parser

    args = build_parser().parse_args(["audit", "latency", "--input", "in", "--output", "s3://b/p",
                                      "--prices", "p.toml", "--master", "local[1]",
                                      "--s3-endpoint-url", "http://127.0.0.1:1"])
    assert (args.job, args.input, args.output, args.prices, args.master, args.s3_endpoint_url) == (
        "latency", "in", "s3://b/p", "p.toml", "local[1]", "http://127.0.0.1:1")
    assert args.tables == ("csv",)
    args = build_parser().parse_args(["audit", "savings", "--input", "in", "--output", "o", "--tables", "csv,parquet"])
    assert args.tables == ("csv", "parquet")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["audit", "savings", "--input", "in", "--output", "o", "--tables", "json"])


@pytest.mark.slow
def test_job_runs_through_spark_submit(tmp_path):
    import pyspark

    write_round_trip_records(str(tmp_path / "audit"))
    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "PYTHONPATH": str(REPO)}
    # The cache job: the cheapest job with a value to check. What spark-submit adds (its
    # master, the entry script's arguments, the session it configures) is the same for every
    # job; the savings values are checked in this session's tests above.
    proc = subprocess.run(
        [str(spark_submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
         "--conf", "spark.sql.shuffle.partitions=2",
         # the quick JIT of local sessions (spark_audit/_io.py): a short job on small input
         "--driver-java-options", QUICK_JIT_JAVA_OPTIONS, str(REPO / "spark_audit" / "submit.py"),
         "cache", "--input", str(tmp_path / "audit"), "--output", str(tmp_path / "out")],
        env=env, capture_output=True, text=True, timeout=300,  # a JVM on a loaded CI host
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (cache,) = read_csv(tmp_path / "out" / "cache_agent.csv")  # agent az2: 1 hit of 2 lookups
    assert (cache["zone"], float(cache["hit_rate"])) == ("az2", 0.5)
    assert "tables written to" in proc.stdout and "cache_agent.csv" in proc.stdout


@pytest.mark.integration
def test_s3_output_writer_and_s3_input_job(spark, s3_bucket, monkeypatch):
    from deploy.local.processes import DUMMY_CREDENTIALS

    for name, value in DUMMY_CREDENTIALS.items():  # boto3's normal chain, as in production
        monkeypatch.setenv(name, value)
    server, bucket = s3_bucket
    write_round_trip_records(f"s3://{bucket}/audit", endpoint_url=server.endpoint_url)
    s3 = server.client()
    keys = sorted(re.sub(r"-[0-9a-f]{6}-", "-RUN-", o["Key"])  # the writer's random run id
                  for o in s3.list_objects_v2(Bucket=bucket, Prefix="audit/")["Contents"])
    pid = os.getpid()
    assert keys == [f"audit/date=2026-01-01/hour=00/zone=az1/proxy-{pid}-RUN-1.jsonl.gz",
                    f"audit/date=2026-01-01/hour=00/zone=az2/agent-{pid}-RUN-1.jsonl.gz"]
    code = run("savings", f"s3://{bucket}/audit", f"s3://{bucket}/results", Prices(),
               s3_endpoint_url=server.endpoint_url, spark=spark, out=io.StringIO())
    assert code == 0
    body = s3.get_object(Bucket=bucket, Key="results/savings.csv")["Body"].read().decode()
    check_round_trip_savings(list(csv.DictReader(io.StringIO(body))), "0.00003482")
