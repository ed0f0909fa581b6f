"""The go / no-go line `azsidecar plan --from-audit` prints for a shadow run (planner/verdict.py):
go when the best priced mode saves, net, at least 10 % of the transfer bill it replaces."""

from __future__ import annotations

import gzip
import json

import pytest

from azsidecar.cli import main as azsidecar_main
from planner.plan import Bill, Usage
from planner.verdict import RULE, shadow_verdict

RULE_TEXT = ("rule: go when the best mode saves, net of S3 requests and storage, at least 10 % of the "
             "cross-zone transfer it replaces")


def bill(mode: str, storage_class: str, total_usd: float, direct_usd: float = 100.0) -> Bill:
    """A month whose whole cost is transfer (`total_usd`) against `direct_usd` direct."""
    return Bill(mode, storage_class, Usage(), transfer_usd=total_usd, s3_put_requests=0, s3_get_requests=0,
                s3_request_usd=0, s3_data_usd=0, direct_transfer_usd=direct_usd)


def test_the_rule_is_stated_as_written():
    assert RULE == RULE_TEXT


@pytest.mark.parametrize(("bills", "line"), [
    # direct $100; the sidecar costs $60 (saves $40, 40 %), the gateway $70: go with the sidecar
    ([bill("direct", "standard", 100), bill("sidecar", "standard", 60), bill("gateway", "standard", 70)],
     f"go: sidecar on S3 standard would save $40.00/month net, 40.0 % of the $100.00/month transfer it "
     f"replaces ({RULE_TEXT})"),
    # the best of four is the gateway on Express: $1,234.50 saved of $2,000, 61.7 %
    ([bill("direct", "standard", 2000, 2000), bill("sidecar", "standard", 1900, 2000),
      bill("gateway", "standard", 1000, 2000), bill("sidecar", "express", 1500, 2000),
      bill("gateway", "express", 765.5, 2000)],
     f"go: gateway on S3 express would save $1,234.50/month net, 61.7 % of the $2,000.00/month transfer it "
     f"replaces ({RULE_TEXT})"),
    # exactly 10 % is go
    ([bill("direct", "standard", 100), bill("sidecar", "standard", 90)],
     f"go: sidecar on S3 standard would save $10.00/month net, 10.0 % of the $100.00/month transfer it "
     f"replaces ({RULE_TEXT})"),
    # 9.9 %: a saving, but within the plan's error on small nets
    ([bill("direct", "standard", 100), bill("sidecar", "standard", 90.1)],
     f"no-go: the best mode, sidecar on S3 standard, would save $9.90/month net, 9.9 % of the $100.00/month "
     f"transfer it replaces ({RULE_TEXT})"),
    # S3 requests cost more than the transfer they avoid
    ([bill("direct", "standard", 5, 5), bill("sidecar", "standard", 8, 5), bill("gateway", "standard", 6.5, 5)],
     f"no-go: the best mode, gateway on S3 standard, would cost $1.50/month more than producing directly, "
     f"-30.0 % of the $5.00/month transfer it replaces ({RULE_TEXT})"),
    # nothing would have taken the WAL route
    ([bill("direct", "standard", 0, 0), bill("sidecar", "standard", 0, 0)],
     f"no-go: the policy would have sent nothing across zones through the WAL, so nothing to save ({RULE_TEXT})"),
])
def test_the_verdict_line(bills, line):
    verdict = shadow_verdict(bills)
    assert verdict.line() == line
    assert verdict.go == line.startswith("go:")


def write_audit(root, records) -> str:
    part = root / "audit" / "date=2026-11-30" / "hour=10" / "zone=use1-az1"
    part.mkdir(parents=True)
    with gzip.open(part / "proxy-1-0.jsonl.gz", "wt") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)
    return str(root / "audit")


def shadow_batch(ts_ms: int, nbytes: int, shadow_route: str = "wal", leader: str = "use1-az2") -> dict:
    """A produce_batch of a proxy in shadow mode: sent direct, `shadow_route` where the policy would have."""
    return {"kind": "produce_batch", "ts_ms": ts_ms, "proxy_id": "orders-1", "zone": "use1-az1",
            "leader_zone": leader, "topic": "orders", "partition": 0, "bytes": nbytes, "route": "direct_cross",
            "shadow_route": shadow_route, "error_code": 0}


@pytest.mark.parametrize(("records", "head", "verdict"), [
    # 10 MB/s for 10 s to a leader in another zone, 100 batches of 100 kB a second: the WAL pays
    ([shadow_batch(t, 100_000) for t in range(0, 10_000, 10)],
     "shadow run: the policy would have sent 100.000 MB (100.0 %) of the 100.000 MB produced across zones "
     "through the WAL",
     "go: sidecar on S3 standard would save $"),
    # 1 kB a second: each WAL object's requests cost far more than the transfer of its bytes (the
    # least bad is Express, whose requests cost less)
    ([shadow_batch(t, 1000) for t in range(0, 10_000, 1000)],
     "shadow run: the policy would have sent 0.010 MB (100.0 %) of the 0.010 MB produced across zones "
     "through the WAL",
     "no-go: the best mode, sidecar on S3 express, would cost $"),
    # the policy kept everything direct (e.g. no topic piloted)
    ([shadow_batch(t, 100_000, shadow_route="direct_cross") for t in range(0, 10_000, 10)],
     "shadow run: the policy would have sent 0.000 MB (0.0 %) of the 100.000 MB produced across zones "
     "through the WAL",
     "no-go: the policy would have sent nothing across zones through the WAL"),
])
def test_plan_from_a_shadow_audit_prints_the_verdict_under_the_split(tmp_path, capsys, records, head, verdict):
    root = write_audit(tmp_path, records)
    assert azsidecar_main(["plan", "--from-audit", root, "--policy", "wal"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(head), lines[0]
    assert lines[1].startswith(verdict), lines[1]
    assert lines[1].endswith(f"({RULE_TEXT})")
