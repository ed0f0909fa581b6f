"""The Kubernetes sidecar example parses, wires the producer to localhost and runs a real
`azsidecar proxy` command line whose configuration loads."""

from __future__ import annotations

import yaml

from azsidecar.cli import build_parser
from azsidecar.config import load_config
from tests.integration.deploy._hcl import ROOT

EXAMPLE = ROOT / "deploy" / "kubernetes" / "producer-with-sidecar.yaml"

def _docs():
    with open(EXAMPLE) as f:
        return {d["kind"]: d for d in yaml.safe_load_all(f) if d}

def test_every_document_parses_and_kinds_are_the_expected_ones():
    assert set(_docs()) == {"ServiceAccount", "ConfigMap", "Secret", "Deployment", "NetworkPolicy"}


def test_network_policy_selects_the_producer_pods_and_admits_no_ingress():
    docs = _docs()
    policy = docs["NetworkPolicy"]["spec"]
    pod_labels = docs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["ingress"] == [] and set(policy["policyTypes"]) == {"Ingress", "Egress"}
    allowed_tcp = {p["port"] for rule in policy["egress"] for p in rule["ports"] if p["protocol"] == "TCP"}
    assert allowed_tcp == {53, 443, 9098, 9400}  # DNS, AWS APIs, MSK IAM listener, agents

def test_sidecar_is_a_native_sidecar_with_a_real_command_and_the_hmac_env(tmp_path):
    docs = _docs()
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    (sidecar,) = pod["initContainers"]
    assert sidecar["restartPolicy"] == "Always"
    argv = sidecar["command"] + [a.replace("$(POD_NAME)", "orders-producer-7c9d-abcde") for a in sidecar["args"]]
    args = build_parser().parse_args(argv[1:])
    assert (args.command, args.zone, args.proxy_id) == ("proxy", "use1-az1", "orders-producer-7c9d-abcde")
    env = {e["name"]: e for e in sidecar["env"]}
    assert env["AZSIDECAR_NOTIFY_HMAC_KEYS"]["valueFrom"]["secretKeyRef"] == {"name": "azsidecar-notify-hmac", "key": "keys"}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert sidecar["securityContext"]["readOnlyRootFilesystem"] is True
    config_port = 9464  # proxy.metrics_port in the ConfigMap
    for name, path in (("startupProbe", "/livez"), ("livenessProbe", "/livez"), ("readinessProbe", "/readyz")):
        assert f"'http://127.0.0.1:{config_port}{path}'" in sidecar[name]["exec"]["command"][-1]

    (producer,) = pod["containers"]
    assert {e["name"]: e.get("value") for e in producer["env"]}["KAFKA_BOOTSTRAP_SERVERS"] == "localhost:9092"
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0] == {"key": "topology.k8s.aws/zone-id", "operator": "In", "values": ["use1-az1"]}

    path = tmp_path / "azsidecar.toml"
    path.write_text(docs["ConfigMap"]["data"]["azsidecar.toml"])
    config = load_config(path, {"zone": args.zone})
    assert config.zone == "use1-az1"
    assert config.proxy.listen_host == "127.0.0.1" and config.proxy.listen_port == 9092
    assert config.upstream.msk_iam and config.upstream.aws_msk_iam_region == "us-east-1"
    assert dict(config.notify.agents)["use1-az2"] == ("use1-az2-a0.azsidecar.internal:9400",
                                                      "use1-az2-a1.azsidecar.internal:9400")
    assert config.wal.prefix == "wal/"
    mounts = {m["name"]: m["mountPath"] for m in sidecar["volumeMounts"]}
    assert mounts["azsidecar-config"] + "/azsidecar.toml" == args.config
    assert mounts["azsidecar-tmp"] == "/tmp"  # writable scratch under a read-only root
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes["azsidecar-tmp"] and volumes["azsidecar-config"]["configMap"]["name"] == "azsidecar"
