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
VALUES = ["--set", "config.wal.bucket=acme-wal", "--set", "config.wal.expected_bucket_owner=123456789012",
          "--set", "sidecarExample.enabled=true", "--set", "monitoring.podMonitor.enabled=true",
          "--set", "monitoring.prometheusRule.enabled=true"]


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


def test_no_bucket_no_chart():
    done = helm("template", "az", str(CHART), *KUBE)
    assert done.returncode != 0
    assert "config.wal.bucket is required: a bucket your account owns (there is no default)" in done.stderr


def test_one_deployment_per_zone_and_component_from_the_zones_list(rendered):
    names = sorted(d["metadata"]["name"] for d in of_kind(rendered, "Deployment"))
    assert names == sorted([f"az-azsidecar-agent-{z}" for z in ZONES] + [f"az-azsidecar-gateway-{z}" for z in ZONES]
                           + [f"orders-producer-{z}" for z in ZONES])
    assert sorted(d["metadata"]["name"] for d in of_kind(rendered, "Service")) == sorted(
        [f"az-azsidecar-agent-{z}" for z in ZONES] + ["az-azsidecar-gateway"])
    assert len(of_kind(rendered, "PodDisruptionBudget")) == 6
    assert [c["metadata"]["name"] for c in of_kind(rendered, "CronJob")] == ["az-azsidecar-gc"]
    for kind in ("ConfigMap", "ServiceAccount", "PodMonitor", "PrometheusRule"):
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


@pytest.mark.parametrize("given", ["012345678901", "12345678901"])
def test_an_account_id_given_with_set_stays_twelve_digits(given, tmp_path):
    # --set reads digits as a number (the leading zero goes); the chart writes the id back as 12 digits
    done = helm("template", "az", str(CHART), *KUBE, "--show-only", "templates/configmap.yaml",
                "--set", "config.wal.bucket=acme-wal", "--set", f"config.wal.expected_bucket_owner={given}")
    assert done.returncode == 0, done.stderr
    path = tmp_path / "azsidecar.toml"
    path.write_text(yaml.safe_load(done.stdout)["data"]["azsidecar.toml"])
    assert load_config(str(path), environ={}).wal.expected_bucket_owner == "012345678901"
