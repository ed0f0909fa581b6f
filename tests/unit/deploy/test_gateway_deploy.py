"""Zone gateway deployment: the Terraform module (one internal NLB per zone, zonal DNS names,
services pinned to their zone) and the Kubernetes example (topology-aware Service), checked
on the parsed files; the configuration they carry loads with the real loader."""

from __future__ import annotations

import yaml

from azsidecar.config import load_config
from tests.integration.deploy._hcl import MODULES, ROOT, attr, blocks, resources, variables

GATEWAY = MODULES / "gateway"
KUBERNETES = ROOT / "deploy" / "kubernetes" / "gateway.yaml"


def test_one_internal_load_balancer_per_zone_without_cross_zone_balancing():
    r = resources(GATEWAY)
    for key in [("aws_lb", "gateway"), ("aws_lb_target_group", "gateway"), ("aws_lb_listener", "gateway"),
                ("aws_route53_record", "gateway"), ("aws_ecs_service", "gateway"),
                ("aws_ecs_task_definition", "gateway")]:
        assert attr(r[key], "for_each") == "${var.zones}", key
    lb = r[("aws_lb", "gateway")]
    assert attr(lb, "internal") is True and attr(lb, "load_balancer_type") == "network"
    assert attr(lb, "enable_cross_zone_load_balancing") is False
    assert attr(lb, "subnets") == "${each.value.subnet_ids}"
    pre = blocks(blocks(lb, "lifecycle")[0], "precondition")[0]
    assert "availability_zone_id == each.key" in attr(pre, "condition")


def test_zonal_dns_name_points_at_the_zone_load_balancer_and_is_what_the_gateway_advertises():
    r = resources(GATEWAY)
    record = r[("aws_route53_record", "gateway")]
    assert attr(record, "name") == "${local.zone_names[each.key]}"
    alias = blocks(record, "alias")[0]
    assert attr(alias, "name") == "${aws_lb.gateway[each.key].dns_name}"
    proxy = resources(GATEWAY, "module")[("config", "settings")][0]["proxy"]  # the parser wraps values in lists
    assert proxy["advertised_host"] == "${local.zone_names[each.key]}"
    assert proxy["advertised_port"] == proxy["listen_port"] == "${var.listener_port}"
    assert proxy["listen_host"] == "0.0.0.0"
    # reachable listener: TLS and SASL files, as the proxy requires
    assert proxy["tls_cert_file"] and proxy["tls_key_file"] and proxy["sasl_users_file"]
    assert proxy["sasl_mechanisms"] == "${var.sasl.mechanisms}"
    assert proxy["workers"] == "${local.workers}"


def test_target_group_drains_like_the_proxy_and_checks_readiness():
    tg = resources(GATEWAY)[("aws_lb_target_group", "gateway")]
    assert attr(tg, "protocol") == "TCP" and attr(tg, "target_type") == "ip"
    assert attr(tg, "deregistration_delay") == "${var.shutdown_grace_s + 5}"
    assert attr(tg, "connection_termination") is True
    health = blocks(tg, "health_check")[0]
    assert attr(health, "path") == "/readyz"


def test_gateway_service_is_pinned_to_its_zone_and_registered_in_its_target_group():
    service = resources(GATEWAY)[("aws_ecs_service", "gateway")]
    net = blocks(service, "network_configuration")[0]
    assert attr(net, "subnets") == "${each.value.subnet_ids}" and attr(net, "assign_public_ip") is False
    lb = blocks(service, "load_balancer")[0]
    assert attr(lb, "target_group_arn") == "${aws_lb_target_group.gateway[each.key].arn}"
    task = resources(GATEWAY)[("aws_ecs_task_definition", "gateway")]
    assert "--proxy-id gw-${each.key}-$(hostname)" in attr(task, "container_definitions")  # unique per task


def test_at_least_two_instances_per_zone_and_whole_vcpus():
    conditions = " ".join(attr(v, "condition") for v in blocks(variables(GATEWAY)["zones"], "validation"))
    assert "z.desired_count >= 2" in conditions
    task = " ".join(attr(v, "condition") for v in blocks(variables(GATEWAY)["task_size"], "validation"))
    assert "[1024, 2048, 4096, 8192, 16384]" in task


def _k8s():
    with open(KUBERNETES) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def test_kubernetes_service_routes_by_topology_and_selects_the_gateways():
    docs = _k8s()
    service = next(d for d in docs if d["kind"] == "Service")
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert service["spec"]["trafficDistribution"] == "PreferClose"
    assert service["metadata"]["annotations"]["service.kubernetes.io/topology-mode"] == "Auto"
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels.get(k) == v for k, v in service["spec"]["selector"].items())
    zones = deployment["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert zones["key"] == "topology.k8s.aws/zone-id" and args[args.index("--zone") + 1] == zones["values"][0]


def test_kubernetes_gateway_config_loads_and_advertises_the_service(tmp_path):
    docs = _k8s()
    config_map = next(d for d in docs if d["kind"] == "ConfigMap")
    service = next(d for d in docs if d["kind"] == "Service")
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    path = tmp_path / "azsidecar.toml"
    path.write_text(config_map["data"]["azsidecar.toml"])
    config = load_config(str(path))
    meta = service["metadata"]
    assert config.proxy.advertised == (f"{meta['name']}.{meta['namespace']}.svc.cluster.local",
                                       service["spec"]["ports"][0]["port"])
    assert config.proxy.listen_port == service["spec"]["ports"][0]["port"]
    assert config.proxy.tls_cert_file and config.proxy.sasl_mechanisms and not config.proxy.insecure_listener
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert int(container["resources"]["requests"]["cpu"]) == config.proxy.workers
    assert pod["terminationGracePeriodSeconds"] > config.proxy.shutdown_grace_s
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    mounts = {v["name"]: v for v in pod["volumes"]}
    assert mounts["tls"]["secret"]["defaultMode"] == 0o400 and mounts["users"]["secret"]["defaultMode"] == 0o400
    assert any(m["mountPath"] + "/tls.key" == config.proxy.tls_key_file for m in container["volumeMounts"])
