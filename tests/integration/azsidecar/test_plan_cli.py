"""`azsidecar plan` as a user runs it: a CSV profile or audit records in, the bill out."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest


def run_plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "azsidecar.cli", "plan", *args],
                          capture_output=True, text=True, timeout=60)


def test_plan_from_csv_prints_each_mode_and_verdicts(tmp_path):
    profile = tmp_path / "profile.csv"
    profile.write_text("host,zone,leader_zone,bytes_per_s,batches_per_s\n"
                       "heavy,az1,az2,1000000,10\n"
                       "heavy,az1,az1,500000,5\n")
    done = run_plan("--profile", str(profile), "--policy", "wal")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    direct = next(line for line in lines if line.startswith("direct"))
    sidecar = next(line for line in lines if line.startswith("sidecar"))
    # hand-computed in tests/unit/router/test_plan.py: $52.58 direct; the sidecar saves $2.22
    assert "52.58" in direct.split()[3]
    assert sidecar.split()[-1] == "2.22"
    assert any("heavy" in line and "sidecar pays" in line for line in lines)


def test_plan_json(tmp_path):
    profile = tmp_path / "profile.csv"
    profile.write_text("host,zone,leader_zone,bytes_per_s,batches_per_s\nh,az1,az2,1000000,10\n")
    done = run_plan("--profile", str(profile), "--policy", "wal", "--format", "json")
    assert done.returncode == 0, done.stderr
    bills = {b["mode"]: b for b in json.loads(done.stdout)["bills"]}
    assert bills["direct"]["transfer_usd"] == pytest.approx(52.5815496)
    assert bills["sidecar"]["s3_put_requests"] == pytest.approx(9_455_238.1)


def test_plan_bad_csv_is_a_configuration_error(tmp_path):
    profile = tmp_path / "profile.csv"
    profile.write_text("host,zone,leader_zone,bytes_per_s\nh,az1,az2,lots\n")
    done = run_plan("--profile", str(profile))
    assert done.returncode == 2
    assert f"{profile}:2: bytes_per_s: 'lots' is not a number" in done.stderr
    profile.write_text("host,zone\nh,az1\n")
    done = run_plan("--profile", str(profile))
    assert done.returncode == 2 and "missing column(s) leader_zone, bytes_per_s" in done.stderr


def test_plan_from_audit_compares(tmp_path):
    part = tmp_path / "date=2026-11-26" / "hour=01" / "zone=az1"
    part.mkdir(parents=True)
    lines = [
        {"kind": "produce_batch", "ts_ms": 0, "zone": "az1", "proxy_id": "p1", "leader_zone": "az2",
         "route": "wal", "bytes": 100_000, "error_code": 0},
        {"kind": "produce_batch", "ts_ms": 2_000, "zone": "az1", "proxy_id": "p1", "leader_zone": "az2",
         "route": "wal", "bytes": 100_000, "error_code": 0},
        {"kind": "wal_flush", "ts_ms": 2_100, "zone": "az1", "put_requests": 1},
        {"kind": "wal_flush", "ts_ms": 2_200, "zone": "az1", "put_requests": 1},
        {"kind": "agent_read", "ts_ms": 2_300, "zone": "az2", "gets": 1},
        {"kind": "agent_read", "ts_ms": 2_300, "zone": "az2", "gets": 1},
    ]
    with gzip.open(part / "proxy-1-0.jsonl.gz", "wt") as fh:
        fh.writelines(json.dumps(x) + "\n" for x in lines)
    (part / ".proxy-1-1.jsonl.gz.inprogress").write_text("not gzip")
    done = run_plan("--from-audit", str(tmp_path), "--compare", "--policy", "wal")
    assert done.returncode == 0, done.stderr
    assert "2.0 s window" in done.stdout
    objects = next(line for line in done.stdout.splitlines() if "WAL objects" in line)
    # 100,000 B/s in 1 batch/s: 1/(0.25 + 1) = 0.8 objects/s x 2 s = 1.6 predicted, 2 audited
    assert objects.split()[3] == "1.6" and objects.split()[5] == "2"
    empty = tmp_path / "empty"
    empty.mkdir()
    done = run_plan("--from-audit", str(empty))
    assert done.returncode == 2 and "no *.jsonl.gz audit files" in done.stderr


def test_plan_closed_loop_profile_against_an_audited_run(tmp_path):
    profile = tmp_path / "profile.csv"
    profile.write_text("host,zone,leader_zone,bytes_per_s\nh,use1-az1,use1-az2,100000\nh,use1-az1,use1-az3,100000\n")
    done = run_plan("--profile", str(profile), "--policy", "wal", "--wal-latency-ms", "1000", "--format", "json")
    assert done.returncode == 0, done.stderr
    sidecar = next(b for b in json.loads(done.stdout)["bills"] if b["mode"] == "sidecar")
    # a request per second to each zone, sent together: an object per second with two shares;
    # each agent a manifest per 1 + 1 s: PUTs (1 + 2 x 0.5) x 2,628,000, GETs 2 x 2,628,000
    assert sidecar["s3_put_requests"] == pytest.approx(5_256_000)
    assert sidecar["s3_get_requests"] == pytest.approx(5_256_000)
    audited = Path(__file__).parents[2] / "unit" / "router" / "fixtures" / "plan" / "fleet-gateways"
    done = run_plan("--profile", str(profile), "--policy", "wal", "--wal-latency-ms", "1000", "--compare",
                    "--audited", str(audited), "--compare-mode", "gateway")
    assert done.returncode == 0, done.stderr
    assert "16.1 s window, gateway mode" in done.stdout
    objects = next(line for line in done.stdout.splitlines() if line.strip().startswith("WAL objects"))
    assert objects.split()[5] == "56"  # the audited run's objects (test_plan_validation counts them)
    done = run_plan("--profile", str(profile), "--compare")
    assert done.returncode == 2 and "--compare needs the run's audit records" in done.stderr
    done = run_plan("--profile", str(profile), "--wal-latency-ms", "0")
    assert done.returncode == 2 and "wal latency 0.0 ms must be > 0" in done.stderr
