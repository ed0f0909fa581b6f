"""The TOML that Terraform renders for sidecars and agents loads into azsidecar's Config.

Inputs are written by hand the way Terraform passes them to templatefile() (optional()
attributes already filled with their defaults); the rendered text goes through the real
loader, so a key the template writes but the code does not know fails here.
"""

from __future__ import annotations

import re
import tomllib

import pytest

from azsidecar.config import load_config
from tests.integration.deploy._hcl import MODULES, TemplateSubsetError, attr, render_template, variables

TEMPLATE = MODULES / "config" / "azsidecar.toml.tftpl"


def sidecar_settings(**changes):
    settings = {
        "zone": "use1-az1",
        "log_format": "json",
        "log_level": "INFO",
        "proxy": {"listen_host": "127.0.0.1", "listen_port": 9092, "proxy_id": "sc-use1-az1",
                  "max_in_flight_per_connection": 32, "shutdown_grace_s": 10, "metrics_port": 9464,
                  "metrics_host": "0.0.0.0", "advertised_host": "", "advertised_port": 0, "workers": 1,
                  "tls_cert_file": "", "tls_key_file": "", "sasl_mechanisms": [], "sasl_users_file": ""},
        "upstream": {"bootstrap_servers": ["b-1.demo.kafka.us-east-1.amazonaws.com:9098",
                                           "b-2.demo.kafka.us-east-1.amazonaws.com:9098"],
                     "client_id": 'azsidecar "quoted" \\ client', "metadata_ttl_s": 30,
                     "request_timeout_s": 30, "connect_timeout_s": 5,
                     # MSK with IAM access control, as the three-az-msk example sets it
                     "security_protocol": "SASL_SSL", "tls_ca_file": "", "tls_check_hostname": True,
                     "sasl_mechanism": "OAUTHBEARER", "sasl_username": "", "sasl_password_file": "",
                     "aws_msk_iam_region": "us-east-1", "aws_msk_iam_role_arn": ""},
        "router": {"policy": "cost", "fallback": "direct",
                   "broker_zones": {"1": "use1-az1", "2": "use1-az2"},
                   "partition_zones": {"orders-*:*": "use1-az4"},
                   "ack_modes": {"audit.*": "wal"},
                   "prices": {"s3_put_per_1000": 0.005, "s3_get_per_1000": 0.0004, "cross_az_per_gb_each_way": 0.01,
                              # 0.0003, not the default 0.00003: Python's json writes that 3e-05, Terraform 0.00003
                              "express_put_per_1000": 0.00113, "express_get_per_1000": 0.0003,
                              "express_upload_per_gb": 0.0032, "express_retrieval_per_gb": 0.0006}},
        "wal": {"bucket": "demo-wal-123456789012", "prefix": "wal/", "region": "us-east-1",
                "storage_class": "standard", "max_bytes": 8388608, "linger_ms": 250, "max_request_cost_share": 0.05,
                "max_buffered_bytes": 67108864,
                "max_in_flight_puts": 4, "max_attempts": 6, "cache_bytes": 268435456,
                "checkpoint_prefix": "_checkpoints", "epoch_prefix": "_epochs", "gc_interval_s": 300,
                "gc_metrics_port": 9465, "gc_metrics_host": "0.0.0.0"},
        "notify": {"agents": {"use1-az1": ["use1-az1-a0.azsidecar.internal:9400"],
                              "use1-az2": ["use1-az2-a0.azsidecar.internal:9400"],
                              "use1-az4": ["use1-az4-a0.azsidecar.internal:9400",
                                           "use1-az4-a1.azsidecar.internal:9400"]},
                   "agent_ownership": "partition", "timeout_s": 10, "max_in_flight_per_zone": 64, "max_attempts": 3},
        "agent": {"listen_host": "127.0.0.1", "listen_port": 9400, "max_concurrent_reads": 8,
                  "max_in_flight_appends": 512, "max_request_bytes": 2097152, "metrics_port": 0, "checkpoint_interval_ms": 2500,
                  "checkpoint_max_keys": 400},
        "audit": {"enabled": True, "output": "s3://demo-wal-123456789012/audit/", "max_queue": 100000,
                  "roll_seconds": 300, "roll_bytes": 67108864},
    }
    settings.update(changes)
    return settings


def render(settings):
    return render_template(TEMPLATE.read_text(), settings)


def test_rendered_sidecar_config_loads_with_the_values_given(tmp_path):
    path = tmp_path / "azsidecar.toml"
    path.write_text(render(sidecar_settings()))
    config = load_config(path)
    assert config.zone == "use1-az1"
    assert config.log_format == "json"
    assert (config.proxy.listen_host, config.proxy.listen_port, config.proxy.metrics_port) == ("127.0.0.1", 9092, 9464)
    assert config.proxy.metrics_host == "0.0.0.0"  # /metrics on the task ENI, Kafka still on loopback
    assert config.proxy.proxy_id == "sc-use1-az1"
    assert config.upstream.bootstrap_servers == ("b-1.demo.kafka.us-east-1.amazonaws.com:9098",
                                                 "b-2.demo.kafka.us-east-1.amazonaws.com:9098")
    assert (config.upstream.security_protocol, config.upstream.sasl_mechanism, config.upstream.aws_msk_iam_region) == (
        "SASL_SSL", "OAUTHBEARER", "us-east-1")
    assert config.upstream.msk_iam and config.upstream.tls and config.upstream.tls_check_hostname
    assert config.upstream.client_id == 'azsidecar "quoted" \\ client'
    assert dict(config.router.broker_zones) == {"1": "use1-az1", "2": "use1-az2"}
    assert dict(config.router.partition_zones) == {"orders-*:*": "use1-az4"}
    assert dict(config.router.ack_modes) == {"audit.*": "wal"}
    assert config.router.prices.s3_get_per_1000 == 0.0004
    assert (config.wal.bucket, config.wal.prefix, config.wal.max_bytes, config.wal.linger_ms) == (
        "demo-wal-123456789012", "wal/", 8 * 1024 * 1024, 250)
    assert (config.wal.checkpoint_prefix, config.wal.epoch_prefix) == ("_checkpoints", "_epochs")
    assert dict(config.notify.agents)["use1-az4"] == ("use1-az4-a0.azsidecar.internal:9400",
                                                      "use1-az4-a1.azsidecar.internal:9400")
    assert config.notify.hmac_keys == ()  # secrets never go through the template
    assert config.notify.agent_ownership == "partition"
    assert config.audit.output == "s3://demo-wal-123456789012/audit/"
    assert config.agent.listen_port == 9400
    assert (config.agent.checkpoint_interval_ms, config.agent.checkpoint_max_keys) == (2500, 400)
    assert (config.agent.max_in_flight_appends, config.agent.max_request_bytes) == (512, 2097152)
    assert (config.wal.gc_metrics_port, config.wal.gc_metrics_host) == (9465, "0.0.0.0")


def test_null_zone_is_left_out_and_empty_maps_render_as_empty_tables(tmp_path):
    settings = sidecar_settings(zone=None)
    settings["router"] = {**settings["router"], "broker_zones": {}, "partition_zones": {}, "ack_modes": {}}
    text = render(settings)
    assert not re.search(r"^zone\s*=", text, re.MULTILINE)
    data = tomllib.loads(text)
    assert data["router"]["broker_zones"] == {} and data["router"]["partition_zones"] == {}
    path = tmp_path / "c.toml"
    path.write_text(text)
    config = load_config(path)
    assert config.zone is None
    assert dict(config.router.broker_zones) == {}


def test_agent_settings_render_a_zone_listener_on_all_interfaces(tmp_path):
    settings = sidecar_settings(zone="use1-az2")
    settings["agent"] = {**settings["agent"], "listen_host": "0.0.0.0", "metrics_port": 9464}
    path = tmp_path / "agent.toml"
    path.write_text(render(settings))
    config = load_config(path)
    assert (config.zone, config.agent.listen_host, config.agent.metrics_port) == ("use1-az2", "0.0.0.0", 9464)


def test_every_typed_setting_is_rendered_and_nothing_else():
    type_expr = attr(variables(MODULES / "config")["settings"], "type")
    typed = set(re.findall(r"\\?'(\w+)\\?':", type_expr))  # nested objects come with escaped quotes
    text = TEMPLATE.read_text()
    rendered = set(re.findall(r"\$\{jsonencode\((?:\w+\.)*(\w+)\)\}", text))
    rendered |= set(re.findall(r"%\{ (?:for \w+, \w+ in|if) (?:\w+\.)*(\w+)", text))
    sections = set(re.findall(r"^\[(\w+)", text, re.MULTILINE))
    loop_vars = {"broker_id", "broker_zone", "pattern", "leader_zone", "topic_glob", "ack_mode", "agent_zone", "address"}
    assert typed == (rendered - loop_vars) | sections | {"prices"}


def test_out_of_range_linger_is_refused_by_the_loader_too(tmp_path):
    """The Terraform validation range and the loader's agree at the edge (60000 ok, 60001 not)."""
    ok = sidecar_settings()
    ok["wal"] = {**ok["wal"], "linger_ms": 60000}
    path = tmp_path / "ok.toml"
    path.write_text(render(ok))
    assert load_config(path).wal.linger_ms == 60000
    bad = sidecar_settings()
    bad["wal"] = {**bad["wal"], "linger_ms": 60001}
    path.write_text(render(bad))
    with pytest.raises(ValueError, match="linger_ms"):
        load_config(path)


def test_renderer_refuses_syntax_outside_its_subset():
    with pytest.raises(TemplateSubsetError):
        render_template("a = ${upper(x)}\n", {"x": "y"})
    with pytest.raises(TemplateSubsetError):
        render_template("%{ if x == 1 ~}\n%{ endif ~}\n", {"x": 1})


@pytest.mark.parametrize("upstream", [
    {"security_protocol": "SSL", "tls_ca_file": "/etc/azsidecar/msk-ca.pem", "tls_check_hostname": False},
    {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "sidecar",
     "sasl_password_file": "/run/secrets/upstream-password"},
    {"security_protocol": "PLAINTEXT", "sasl_mechanism": "", "aws_msk_iam_region": ""},
])
def test_upstream_tls_and_sasl_variants_render_and_load(tmp_path, upstream):
    settings = sidecar_settings()
    plain = {"security_protocol": "PLAINTEXT", "tls_ca_file": "", "tls_check_hostname": True, "sasl_mechanism": "",
             "sasl_username": "", "sasl_password_file": "", "aws_msk_iam_region": "", "aws_msk_iam_role_arn": ""}
    settings["upstream"] = {**settings["upstream"], **plain, **upstream}
    path = tmp_path / "c.toml"
    path.write_text(render(settings))
    loaded = load_config(path).upstream
    for key, value in upstream.items():
        assert getattr(loaded, key) == value, key
    assert not loaded.msk_iam


def test_express_settings_render_and_a_null_linger_takes_the_class_default(tmp_path):
    settings = sidecar_settings()
    settings["wal"] = {**settings["wal"], "bucket": "demo-wal", "storage_class": "express", "linger_ms": None,
                       "max_request_cost_share": 0.1}
    text = render(settings)
    assert not re.search(r"^linger_ms\s*=", text, re.MULTILINE)
    path = tmp_path / "express.toml"
    path.write_text(text)
    config = load_config(path)
    assert (config.wal.storage_class, config.wal.linger_ms, config.wal.max_request_cost_share) == ("express", 20, 0.1)
    assert config.wal.bucket_for("use1-az2") == "demo-wal--use1-az2--x-s3"
    assert config.router.prices.express_upload_per_gb == 0.0032
