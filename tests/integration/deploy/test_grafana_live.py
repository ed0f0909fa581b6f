"""The dashboard's queries find their series on the real processes' /metrics endpoints.

Two zones on loopback (moto, one Tansu broker per zone); each zone runs `azsidecar agent`
and `azsidecar proxy` with their metrics ports set. kcat produces through zone az1's
sidecar to a partition led in az2, so the batch takes the WAL route: the az1 proxy writes
the object and notifies, the az2 agent reads it and appends. Then every metric a panel
queries must be exposed by the process that owns it (the proxy or the agent, as a
Prometheus scrape of that process would see it; `azsidecar gc` is tested in
tests/integration/wal_s3/test_gc.py), and
the ones this produce exercised must have moved. test_grafana.py checks names against the
code; this checks what is served.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time

import pytest

from deploy.local.processes import DUMMY_CREDENTIALS, STARTUP_TIMEOUT_S, free_port, stop_process
from deploy.local.sidecar_stack import SidecarSettings, agent_addresses, to_toml, zone_config
from deploy.local.zones import three_zones
from tests import metrics_scrape
from tests.conftest import create_topics, unique_name
from tests.integration.deploy._hcl import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

DASHBOARD = ROOT / "deploy" / "grafana" / "azsidecar-dashboard.json"
READY_TIMEOUT_S = STARTUP_TIMEOUT_S
# Which process serves a metric, by name prefix (the scrape target a panel depends on).
OWNER = (("azsidecar_proxy_", "proxy"), ("azsidecar_notify_", "proxy"), ("azsidecar_wal_flush", "proxy"),
         ("azsidecar_wal_put_", "proxy"), ("azsidecar_wal_buffered_", "proxy"),
         ("azsidecar_wal_gray_", "proxy"),  # PUTs abandoned in the proxy (GETs in the agent count there too)
         ("azsidecar_router_", "proxy"),
         ("azsidecar_agent_", "agent"), ("azsidecar_wal_cache_", "agent"), ("azsidecar_wal_gc_", "gc"))




def owner(name: str) -> str:
    for prefix, process in OWNER:
        if name.startswith(prefix):
            return process
    raise AssertionError(f"{name}: no owner declared in OWNER")


def _wait_for_port(host: str, port: int, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited with {proc.returncode}: {proc.log_path.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} not listening on {port} within {READY_TIMEOUT_S}s")
            time.sleep(0.05)  # polling a port for readiness, bounded by the deadline


def scrape(port: int) -> tuple[set[str], dict[tuple[str, tuple], float]]:
    """(families and series names exposed, {(sample name, labels): value})."""
    names, samples = set(), {}
    for family in metrics_scrape.families(port):
        names.add(family.name)
        for s in family.samples:
            names.add(s.name)
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return names, samples


def total(samples: dict, name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and labels.items() <= dict(ls).items())


def dashboard_metrics() -> set[str]:
    dash = json.loads(DASHBOARD.read_text())
    return {m for p in dash["panels"] for t in p.get("targets", []) for m in re.findall(r"\b(azsidecar_[a-z0-9_]+)", t["expr"])}


def exposed(name: str, names: set[str]) -> bool:
    # A counter family "x" serves samples "x_total"; a histogram "x" serves x_bucket/_sum/_count.
    family = re.sub(r"_(total|bucket|sum|count)$", "", name)
    return name in names or family in names


def test_every_panel_metric_is_served_by_its_process_and_a_wal_produce_moves_them(tmp_path):
    topic = unique_name("dash")
    with three_zones(("az1", "az2"), mode="loopback", log_dir=tmp_path / "zones") as env:
        env.create_bucket("wal")
        create_topics(env.zone("az1").broker_bootstrap, {topic: 1})
        settings = SidecarSettings(wal_bucket="wal", audit_dir=tmp_path / "audit", policy="wal",
                                   partition_zones={f"{topic}:*": "az2"})
        agents = agent_addresses(env)
        process_env = {**DUMMY_CREDENTIALS, "AZSIDECAR_NOTIFY_HMAC_KEYS": settings.hmac_key,
                       "AZSIDECAR_IMDS_ENDPOINT": "http://127.0.0.1:9", "AWS_DEFAULT_REGION": "us-east-1"}
        ports, procs = {}, []
        try:
            for zone in env.zones:
                config = zone_config(env, zone, settings, agents)
                ports[zone.name] = {"proxy": free_port(), "agent": free_port()}
                config["proxy"]["metrics_port"] = ports[zone.name]["proxy"]
                config["agent"]["metrics_port"] = ports[zone.name]["agent"]
                path = tmp_path / f"{zone.name}.toml"
                path.write_text(to_toml(config))
                for command in ("agent", "proxy"):
                    proc = env.run_in_zone(zone, [sys.executable, "-m", "azsidecar", command, "--config", str(path)],
                                           process_env, log_name=f"{zone.name}-{command}")
                    procs.append(proc)
                    host, _, port = (agents[zone.name] if command == "agent" else zone.sidecar_bootstrap).rpartition(":")
                    _wait_for_port(host, int(port), proc, f"{command} of {zone.name}")

            done = subprocess.run(["kcat", "-P", "-b", env.zone("az1").sidecar_bootstrap, "-t", topic,
                                   "-X", "acks=all"], input=b"one\ntwo\nthree\n", capture_output=True, timeout=60)
            assert done.returncode == 0, done.stderr
            served = {"proxy": scrape(ports["az1"]["proxy"]), "agent": scrape(ports["az2"]["agent"])}
        finally:
            for proc in reversed(procs):
                stop_process(proc, 15.0)

    wanted = dashboard_metrics()
    # `azsidecar gc` is not started here; its /metrics is scraped in tests/integration/wal_s3/test_gc.py.
    unserved = sorted(m for m in wanted if owner(m) != "gc" and not exposed(m, served[owner(m)][0]))
    assert unserved == [], unserved
    proxy, agent = served["proxy"][1], served["agent"][1]
    # The produce took the WAL route and every stage whose series is served counted it.
    assert total(proxy, "azsidecar_proxy_received_bytes_total", route="wal") > 0
    assert total(proxy, "azsidecar_proxy_received_bytes_total", route="local") == 0
    assert total(proxy, "azsidecar_wal_flush_bytes_count") >= 1
    assert total(proxy, "azsidecar_wal_put_seconds_count") >= 1
    assert total(proxy, "azsidecar_wal_flushes_total") >= 1
    assert total(agent, "azsidecar_agent_notifications_total", outcome="ok") >= 1
    assert total(agent, "azsidecar_agent_appended_bytes_total") > 0
    assert total(agent, "azsidecar_agent_append_latency_seconds_count") >= 1
    # The notification sender's and the block cache's counters are served by their processes.
    assert total(proxy, "azsidecar_notify_notifications_total", outcome="ok") >= 1
    assert total(proxy, "azsidecar_notify_rtt_seconds_count") >= 1
    assert total(agent, "azsidecar_wal_cache_misses_total") >= 1
    # The savings panel's prices: the default router.prices, S3 Standard (per unit, by hand).
    assert total(proxy, "azsidecar_router_price_usd", item="cross_zone_transfer_byte") == pytest.approx(2e-11)
    assert total(proxy, "azsidecar_router_price_usd", item="wal_put_request") == pytest.approx(5e-6)
    assert total(proxy, "azsidecar_router_price_usd", item="wal_upload_byte") == 0
