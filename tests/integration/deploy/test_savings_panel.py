"""The dashboard's "Estimated net savings" expressions evaluated by a real promtool on
hand-written series, with the prices as the proxies serve them (azsidecar_router_price_usd).

S3 Express prices, so every term counts: the WAL route carries 1e8 B/s (6e9 bytes a minute)
from zone use1-az1 in 10 PUTs/s of 1e7 bytes, and the agents miss their cache once a second.
By hand, in $/h:
  transfer avoided  1e8 x 2e-11 x 3600                                  = 7.2
  S3 PUT            (10 x 1.13e-6 + 1e8 x 0.0032 / 2**30) x 3600         = 1.11356...
  S3 GET            (1 x 3e-8 + 1e8 x 0.0006 / 2**30) x 3600             = 0.20127...
  net               7.2 - 1.11356 - 0.20127                              = 5.88516...
A proxy of use1-az3, outside the chosen zones, carries traffic that must not count.
"""

from __future__ import annotations

import json
import subprocess

import yaml

from tests.integration.deploy._hcl import ROOT
from tests.integration.deploy._tools import tool

DASHBOARD = ROOT / "deploy" / "grafana" / "azsidecar-dashboard.json"
TIMEOUT_S = 120
PRICES = {"cross_zone_transfer_byte": "2e-11", "wal_put_request": "1.13e-6", "wal_get_request": "3e-8",
          "wal_upload_byte": "2.9802322387695312e-12", "wal_retrieval_byte": "5.587935447692871e-13"}
SERIES = [
    *({"series": f'azsidecar_router_price_usd{{zone="{zone}", component="proxy", item="{item}"}}',
       "values": f"{usd}x20"} for item, usd in PRICES.items() for zone in ("use1-az1", "use1-az2")),
    {"series": 'azsidecar_proxy_received_bytes_total{zone="use1-az1", route="wal"}', "values": "0+6000000000x20"},
    {"series": 'azsidecar_proxy_received_bytes_total{zone="use1-az1", route="direct_cross"}', "values": "0+7x20"},
    {"series": 'azsidecar_wal_flushes_total{zone="use1-az1", reason="max_bytes"}', "values": "0+600x20"},
    {"series": 'azsidecar_wal_flush_bytes_sum{zone="use1-az1"}', "values": "0+6000000000x20"},
    {"series": 'azsidecar_wal_cache_misses_total{zone="use1-az2"}', "values": "0+60x20"},
    # use1-az3 is not among the zones chosen
    {"series": 'azsidecar_proxy_received_bytes_total{zone="use1-az3", route="wal"}', "values": "0+9000000000x20"},
    {"series": 'azsidecar_wal_flushes_total{zone="use1-az3", reason="linger"}', "values": "0+6000x20"},
    {"series": 'azsidecar_wal_cache_misses_total{zone="use1-az3"}', "values": "0+6000x20"},
]
# Rounded to the cent's tenth, so that promtool compares exact numbers.
EXPECTED = {"A": "7.2", "B": "1.114", "C": "0.201", "D": "5.885"}


def _savings_exprs() -> dict[str, str]:
    (panel,) = [p for p in json.loads(DASHBOARD.read_text())["panels"]
                if p["title"].startswith("Estimated net savings")]
    return {t["refId"]: t["expr"].replace("$zone", "use1-az1|use1-az2").replace("$__rate_interval", "5m")
            for t in panel["targets"]}


def test_the_savings_lines_price_the_traffic_with_the_served_prices(tmp_path):
    (tmp_path / "none.rules.yaml").write_text("groups: []\n")
    exprs = _savings_exprs()
    assert set(exprs) == set(EXPECTED)
    cases = {"rule_files": ["none.rules.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": SERIES,
        "promql_expr_test": [{"expr": f"round({exprs[ref]}, 0.001)", "eval_time": "10m",
                              "exp_samples": [{"labels": "{}", "value": float(value)}]}
                             for ref, value in EXPECTED.items()],
    }]}
    (tmp_path / "savings_test.yaml").write_text(yaml.safe_dump(cases, sort_keys=False))
    done = subprocess.run([tool("promtool"), "test", "rules", "savings_test.yaml"], capture_output=True, text=True,
                          timeout=TIMEOUT_S, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
