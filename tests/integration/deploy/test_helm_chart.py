"""The Helm chart (deploy/helm/azsidecar) through a real helm: lint, and the rendered objects
checked against azsidecar itself - the ConfigMap's TOML loads with each Deployment's
environment, every command parses with the real CLI, every probe is HTTP on the status port."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from azsidecar.cli import build_parser
from azsidecar.config import load_config
from tests.integration.deploy._hcl import ROOT
from tests.integration.deploy._tools import tool

CHART = ROOT / "deploy" / "helm" / "azsidecar"
TIMEOUT_S = 120
ZONES = ("use1-az1", "use1-az2", "use1-az4")
# A helm built with `go install` (HELM_FROM_SOURCE=1) reports Kubernetes v1.20 as its default
# target, a release build its own: name the version the chart is for.
KUBE = ["--kube-version", "1.31.0"]
# Where records go has no default: the bucket, its region and the brokers are named.
REQUIRED = ("config.wal.bucket=acme-wal", "config.wal.region=us-east-1",
            "config.upstream.bootstrap_servers=b-1.demo:9098\\,b-2.demo:9098",
            "config.upstream.aws_msk_iam_region=us-east-1")
SETTINGS = (*REQUIRED, "config.wal.expected_bucket_owner=123456789012", "sidecarExample.enabled=true",
            "monitoring.podMonitor.enabled=true", "monitoring.serviceMonitor.enabled=true",
            "monitoring.prometheusRule.enabled=true")


def with_set(*settings: str) -> list[str]:
    return [arg for setting in settings for arg in ("--set", setting)]


VALUES = with_set(*SETTINGS)


def helm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([tool("helm"), *args], capture_output=True, text=True, timeout=TIMEOUT_S)


@pytest.fixture(scope="module")
def rendered() -> list[dict]:
    done = helm("template", "az", str(CHART), "--namespace", "kafka-proxy", *KUBE, *VALUES)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def of_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def test_helm_lint():
    done = helm("lint", str(CHART), "--strict", *KUBE, *VALUES)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


@pytest.mark.parametrize(("left_out", "message"), [
    ("config.wal.bucket", "config.wal.bucket is required: a bucket your account owns (there is no default)"),
    ("config.wal.region", "config.wal.region is required: the region of config.wal.bucket (there is no default)"),
    ("config.upstream.bootstrap_servers",
     "config.upstream.bootstrap_servers is required: your cluster's brokers (there is no default)"),
    ("config.upstream.aws_msk_iam_region",
     "config.upstream.aws_msk_iam_region is required with OAUTHBEARER (MSK IAM): the cluster's region"),
])
def test_no_chart_without_where_records_go(left_out, message):
    done = helm("template", "az", str(CHART), *KUBE, *with_set(*(s for s in REQUIRED if not s.startswith(left_out + "="))))
    assert done.returncode != 0
    assert message in done.stderr


def test_one_deployment_per_zone_and_component_from_the_zones_list(rendered):
    names = sorted(d["metadata"]["name"] for d in of_kind(rendered, "Deployment"))
    assert names == sorted([f"az-azsidecar-agent-{z}" for z in ZONES] + [f"az-azsidecar-gateway-{z}" for z in ZONES]
                           + [f"orders-producer-{z}" for z in ZONES])
    assert sorted(d["metadata"]["name"] for d in of_kind(rendered, "Service")) == sorted(
        [f"az-azsidecar-agent-{z}" for z in ZONES] + ["az-azsidecar-gateway"])
    assert len(of_kind(rendered, "PodDisruptionBudget")) == 6
    assert [c["metadata"]["name"] for c in of_kind(rendered, "CronJob")] == ["az-azsidecar-gc"]
    for kind in ("ConfigMap", "ServiceAccount", "PodMonitor", "ServiceMonitor", "PrometheusRule"):
        assert len(of_kind(rendered, kind)) == 1, kind


def _containers(doc: dict) -> list[dict]:
    spec = doc["spec"]["template"]["spec"] if doc["kind"] == "Deployment" else \
        doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return [c for c in spec.get("initContainers", []) + spec["containers"] if "azsidecar" in c["image"]]


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] if "value" in e else f"<from {next(iter(e['valueFrom']))}>"
            for e in container.get("env", [])}


def test_every_process_loads_the_configmap_with_its_environment(rendered, tmp_path):
    (configmap,) = of_kind(rendered, "ConfigMap")
    path = tmp_path / "azsidecar.toml"
    path.write_text(configmap["data"]["azsidecar.toml"])
    parser = build_parser()
    seen = set()
    for doc in of_kind(rendered, "Deployment") + of_kind(rendered, "CronJob"):
        for container in _containers(doc):
            args = parser.parse_args([a if a != "$(POD_NAME)" else "pod-0" for a in container["args"]])
            env = {k: v for k, v in _env(container).items() if k.startswith("AZSIDECAR__")}
            config = load_config(str(path), environ=env)
            seen.add((args.command, config.zone))
            assert config.wal.bucket == "acme-wal" and config.wal.expected_bucket_owner == "123456789012"
            assert dict(config.notify.agents) == {
                z: f"az-azsidecar-agent-{z}.kafka-proxy.svc.cluster.local:9400" for z in ZONES}
            if args.command == "proxy" and doc["metadata"]["name"].startswith("az-azsidecar-gateway"):
                assert (config.proxy.listen_host, config.proxy.listen_port, config.proxy.workers) == ("0.0.0.0", 9094, 2)
                assert config.proxy.advertised_host == "az-azsidecar-gateway.kafka-proxy.svc.cluster.local"
                assert config.proxy.sasl_mechanisms == ("SCRAM-SHA-512",)
            elif args.command == "proxy":  # the sidecar: Kafka on loopback, status on the pod IP
                assert (config.proxy.listen_host, config.proxy.listen_port) == ("127.0.0.1", 9092)
            if args.command in ("proxy", "agent"):
                assert _env(container)["AZSIDECAR_NOTIFY_HMAC_KEYS"] == "<from secretKeyRef>"
                assert config.proxy.metrics_host == "0.0.0.0" and config.proxy.metrics_port == 9464
                assert config.agent.metrics_port == 9464 and config.agent.listen_host == "0.0.0.0"
    assert seen == {("agent", z) for z in ZONES} | {("proxy", z) for z in ZONES} | {("gc", None)}


def test_probes_are_http_on_the_status_port(rendered):
    probed = 0
    for doc in of_kind(rendered, "Deployment"):
        for container in _containers(doc):
            ports = {p["name"]: p["containerPort"] for p in container["ports"]}
            assert ports["status"] == 9464
            assert container["startupProbe"]["httpGet"] == {"path": "/livez", "port": "status"}
            assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "status"}
            assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "status"}
            probed += 1
    assert probed == 9


def test_the_sidecar_is_a_native_sidecar_pinned_to_its_zone(rendered):
    for zone in ZONES:
        (doc,) = [d for d in of_kind(rendered, "Deployment") if d["metadata"]["name"] == f"orders-producer-{zone}"]
        spec = doc["spec"]["template"]["spec"]
        (sidecar,) = spec["initContainers"]
        assert sidecar["restartPolicy"] == "Always"
        assert _env(sidecar)["AZSIDECAR__ZONE"] == zone
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchExpressions": [{"key": "topology.k8s.aws/zone-id", "operator": "In",
                                                "values": [zone]}]}]
        assert {c["name"]: c for c in spec["containers"]}["producer"]["env"] == [
            {"name": "KAFKA_BOOTSTRAP_SERVERS", "value": "localhost:9092"}]


def test_selectors_match_their_pods(rendered):
    pods = {d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"] for d in of_kind(rendered, "Deployment")}
    for doc in of_kind(rendered, "Deployment"):
        assert doc["spec"]["selector"]["matchLabels"].items() <= pods[doc["metadata"]["name"]].items()
    for pdb in of_kind(rendered, "PodDisruptionBudget"):
        matched = [n for n, labels in pods.items() if pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()]
        assert matched == [pdb["metadata"]["name"]], pdb["metadata"]["name"]
    for service in of_kind(rendered, "Service"):
        matched = [n for n, labels in pods.items() if service["spec"]["selector"].items() <= labels.items()]
        expected = ([service["metadata"]["name"]] if "agent" in service["metadata"]["name"]
                    else [f"az-azsidecar-gateway-{z}" for z in ZONES])
        assert sorted(matched) == sorted(expected)


def test_the_prometheus_rule_is_the_checked_rule_file(rendered):
    (rule,) = of_kind(rendered, "PrometheusRule")
    assert rule["spec"] == yaml.safe_load((CHART / "files" / "alerts.rules.yaml").read_text())
    (monitor,) = of_kind(rendered, "PodMonitor")
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "status"
    assert monitor["spec"]["podMetricsEndpoints"][0]["relabelings"] == [
        {"sourceLabels": ["__meta_kubernetes_pod_label_azsidecar_io_zone"], "targetLabel": "zone"}]


def test_each_agent_deployment_spreads_its_own_pods_over_nodes(rendered):
    agents = [d for d in of_kind(rendered, "Deployment") if d["metadata"]["name"].startswith("az-azsidecar-agent-")]
    assert len(agents) == len(ZONES)
    for doc in agents:
        pod = doc["spec"]["template"]
        (spread,) = pod["spec"]["topologySpreadConstraints"]
        assert {k: v for k, v in spread.items() if k != "labelSelector"} == {
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}
        zone = doc["metadata"]["name"].removeprefix("az-azsidecar-agent-")
        assert spread["labelSelector"] == {"matchLabels": {
            "app.kubernetes.io/name": "azsidecar", "app.kubernetes.io/instance": "az",
            "app.kubernetes.io/component": "agent", "azsidecar.io/zone": zone}}
        assert spread["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()


def _selects(selector: dict, labels: dict) -> bool:
    """A Kubernetes label selector (matchLabels, matchExpressions with Exists, In, NotIn) on `labels`."""
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for e in selector.get("matchExpressions", []):
        key, op = e["key"], e["operator"]
        if op == "Exists" and key not in labels or op == "In" and labels.get(key) not in e["values"] \
                or op == "NotIn" and labels.get(key) in e["values"]:
            return False
    return True


def _scrapes_per_deployment(docs: list[dict]) -> dict[str, list[str]]:
    """Deployment name -> the monitors that scrape its pods (a ServiceMonitor through a Service
    that selects them and has the monitor's port)."""
    out = {}
    for doc in of_kind(docs, "Deployment"):
        labels = doc["spec"]["template"]["metadata"]["labels"]
        by = [m["kind"] for m in of_kind(docs, "PodMonitor") if _selects(m["spec"]["selector"], labels)]
        for monitor in of_kind(docs, "ServiceMonitor"):
            ports = {e["port"] for e in monitor["spec"]["endpoints"]}
            by += [monitor["kind"] for svc in of_kind(docs, "Service")
                   if _selects(monitor["spec"]["selector"], svc["metadata"]["labels"])
                   and svc["spec"]["selector"].items() <= labels.items()
                   and ports & {p["name"] for p in svc["spec"]["ports"]}]
        out[doc["metadata"]["name"]] = by
    return out


def test_every_pod_is_scraped_once_and_the_agents_through_their_services(rendered):
    scrapes = _scrapes_per_deployment(rendered)
    assert scrapes == {name: ["ServiceMonitor"] if name.startswith("az-azsidecar-agent-") else ["PodMonitor"]
                       for name in scrapes}
    (monitor,) = of_kind(rendered, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["relabelings"] == [
        {"sourceLabels": ["__meta_kubernetes_pod_label_azsidecar_io_zone"], "targetLabel": "zone"}]


def test_without_the_service_monitor_the_pod_monitor_scrapes_the_agents():
    done = helm("template", "az", str(CHART), *KUBE,
                *with_set(*(s for s in SETTINGS if s != "monitoring.serviceMonitor.enabled=true")))
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert of_kind(docs, "ServiceMonitor") == []
    scrapes = _scrapes_per_deployment(docs)
    assert len(scrapes) == 9 and set(map(tuple, scrapes.values())) == {("PodMonitor",)}


FLOOR_LINE = "< {}  # floor, USD/h: monitoring.prometheusRule.netSavingsFloorUsdPerHour"
# S3 Express prices; the WAL route carries 1e8 B/s in 10 PUTs/s of 1e7 bytes and 1 GET/s: by hand,
# (1e8 x 2e-11 - 1e8 x 0.0006/2**30 - 10 x 1.13e-6 - 1e8 x 0.0032/2**30 - 1 x 3e-8) x 3600 = 5.885 USD/h.
# Without either per-byte charge it would be above 6.
EXPRESS_SAVINGS = [
    {"series": f'azsidecar_router_price_usd{{zone="use1-az1", item="{item}"}}', "values": f"{usd}x100"}
    for item, usd in (("cross_zone_transfer_byte", "2e-11"), ("wal_put_request", "1.13e-6"), ("wal_get_request", "3e-8"),
                      ("wal_upload_byte", "2.9802322387695312e-12"), ("wal_retrieval_byte", "5.587935447692871e-13"))
] + [
    {"series": 'azsidecar_proxy_received_bytes_total{zone="use1-az1", route="wal"}', "values": "0+6000000000x100"},
    {"series": 'azsidecar_wal_flushes_total{zone="use1-az1", reason="linger"}', "values": "0+600x100"},
    {"series": 'azsidecar_wal_flush_bytes_sum{zone="use1-az1"}', "values": "0+6000000000x100"},
    {"series": 'azsidecar_wal_cache_misses_total{zone="use1-az2"}', "values": "0+60x100"},
]


def _promtool_savings_case(rules: dict, exp_alerts: list[dict], tmp_path) -> subprocess.CompletedProcess:
    """promtool test rules: `rules` on EXPRESS_SAVINGS give `exp_alerts` of the savings alert at 90 minutes."""
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    cases = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": EXPRESS_SAVINGS,
        "alert_rule_test": [{"eval_time": "90m", "alertname": "AzsidecarNetSavingsBelowFloor",
                             "exp_alerts": exp_alerts}]}]}
    (tmp_path / "rules_test.yaml").write_text(yaml.safe_dump(cases))
    return subprocess.run([tool("promtool"), "test", "rules", "rules_test.yaml"], capture_output=True, text=True,
                          timeout=TIMEOUT_S, cwd=tmp_path)


@pytest.mark.parametrize(("floor", "fires"), [("6", True), ("5.8", False), ("-2", False)])
def test_the_savings_floor_of_the_values_is_the_alert_s(floor, fires, tmp_path):
    done = helm("template", "az", str(CHART), *KUBE, *VALUES, "--show-only", "templates/monitoring.yaml",
                *with_set(f"monitoring.prometheusRule.netSavingsFloorUsdPerHour={floor}"))
    assert done.returncode == 0, done.stderr
    (rule,) = of_kind([d for d in yaml.safe_load_all(done.stdout) if d], "PrometheusRule")
    checked = (CHART / "files" / "alerts.rules.yaml").read_text()
    assert rule["spec"] == yaml.safe_load(checked.replace(FLOOR_LINE.format(0), FLOOR_LINE.format(floor)))
    (alert,) = [r for g in rule["spec"]["groups"] for r in g["rules"] if r.get("alert") == "AzsidecarNetSavingsBelowFloor"]
    expected = [{"exp_labels": {"severity": "warning"}, "exp_annotations": {
        **alert["annotations"], "summary": "azsidecar's estimated net savings are 5.89 USD/h, below the floor"}}]
    verdict = _promtool_savings_case(rule["spec"], expected if fires else [], tmp_path)
    assert verdict.returncode == 0, verdict.stdout + verdict.stderr


@pytest.mark.parametrize("floor", ["ten", "1.2.3", ""])
def test_a_savings_floor_that_is_no_number_stops_the_chart(floor):
    done = helm("template", "az", str(CHART), *KUBE, *VALUES,
                *with_set(f"monitoring.prometheusRule.netSavingsFloorUsdPerHour={floor}"))
    assert done.returncode != 0
    assert f'monitoring.prometheusRule.netSavingsFloorUsdPerHour: a number of USD per hour, got "{floor}"' in done.stderr


@pytest.mark.parametrize("given", ["012345678901", "12345678901"])
def test_an_account_id_given_with_set_stays_twelve_digits(given, tmp_path):
    # --set reads digits as a number (the leading zero goes); the chart writes the id back as 12 digits
    done = helm("template", "az", str(CHART), *KUBE, "--show-only", "templates/configmap.yaml",
                *with_set(*REQUIRED), "--set", f"config.wal.expected_bucket_owner={given}")
    assert done.returncode == 0, done.stderr
    path = tmp_path / "azsidecar.toml"
    path.write_text(yaml.safe_load(done.stdout)["data"]["azsidecar.toml"])
    assert load_config(str(path), environ={}).wal.expected_bucket_owner == "012345678901"
