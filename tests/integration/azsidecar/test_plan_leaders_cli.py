"""`azsidecar plan leaders` refusing bad input with exit code 2 and a readable line, before any
cluster is asked (the runs against a cluster: tests/integration/kafka/test_leader_placement_on_kafka.py)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "azsidecar.cli", "plan", "leaders", *args],
                          capture_output=True, text=True, timeout=60)


def audit(tmp_path, records) -> str:
    part = tmp_path / "audit" / "date=2026-11-29" / "hour=01" / "zone=use1-az1"
    part.mkdir(parents=True)
    with gzip.open(part / "proxy-1-0.jsonl.gz", "wt") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)
    return str(tmp_path / "audit")


@pytest.mark.parametrize(("args", "message"), [
    (["--bootstrap-servers", "127.0.0.1:1", "--from-audit", "/nonexistent"], "/nonexistent: no *.jsonl.gz audit files"),
    (["--from-audit", "x"], "upstream.bootstrap_servers: must be set: there is no default cluster"),
    (["--bootstrap-servers", "127.0.0.1", "--from-audit", "x"], "upstream.bootstrap_servers: '127.0.0.1' is not host:port"),
    (["--bootstrap-servers", "127.0.0.1:1", "--from-audit", "x", "--skew", "-1"], "argument --skew: -1 is below 0"),
    (["--bootstrap-servers", "127.0.0.1:1", "--from-audit", "x", "--batch-size", "0"], "argument --batch-size: 0 is below 1"),
    (["--bootstrap-servers", "127.0.0.1:1"], "give --from-audit DIR (or --apply --plan FILE)"),
    (["--bootstrap-servers", "127.0.0.1:1", "--plan", "p.json", "--from-audit", "x"],
     "--plan FILE is carried out with --apply"),
])
def test_bad_input_is_exit_code_2_with_one_readable_line(args, message):
    done = run(*args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_an_audit_without_produce_batches_is_bad_input(tmp_path):
    root = audit(tmp_path, [{"kind": "wal_flush", "ts_ms": 1, "zone": "use1-az1", "put_requests": 1}])
    done = run("--bootstrap-servers", "127.0.0.1:1", "--from-audit", root)
    assert done.returncode == 2 and f"{root}: no successful produce_batch or produce_summary records" in done.stderr
    done = run("--bootstrap-servers", "127.0.0.1:1", "--from-audit", root, "--topic", "orders")
    assert done.returncode == 2 and "no successful produce_batch or produce_summary records of topic(s) orders" in done.stderr


def test_the_billing_plan_still_wants_a_source():
    done = subprocess.run([sys.executable, "-m", "azsidecar.cli", "plan"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "give --profile CSV or --from-audit DIR" in done.stderr
