"""Zone gateway settings: who may listen where, advertised address, worker identities."""

from __future__ import annotations

import pytest

from azsidecar.config import Config
from azsidecar.workers import worker_config
from core.configload import ConfigError, build
from proxy.config import ProxyConfig

TLS = {"tls_cert_file": "/etc/gw/cert.pem", "tls_key_file": "/etc/gw/key.pem"}
SASL = {"sasl_mechanisms": ["SCRAM-SHA-512"], "sasl_users_file": "/etc/gw/users.toml"}


def proxy(**settings) -> ProxyConfig:
    return build(ProxyConfig, settings, "proxy")


def test_loopback_sidecar_needs_neither_tls_nor_sasl():
    assert proxy(listen_host="127.0.0.1").advertised == ("127.0.0.1", 0)


@pytest.mark.parametrize("settings", [
    {"listen_host": "10.0.1.5"},
    {"listen_host": "10.0.1.5", **TLS},
    {"listen_host": "10.0.1.5", **SASL},
    {"listen_host": "0.0.0.0", "advertised_host": "gw.use1-az1.example", **SASL},
])
def test_reachable_listener_without_tls_and_sasl_is_refused(settings):
    with pytest.raises(ConfigError, match=r"proxy.listen_host: .* needs TLS .* and SASL .*insecure_listener"):
        proxy(**settings)


def test_reachable_listener_with_tls_and_sasl_or_the_opt_out():
    gw = proxy(listen_host="10.0.1.5", **TLS, **SASL)
    assert gw.advertised == ("10.0.1.5", 0)
    assert proxy(listen_host="10.0.1.5", insecure_listener=True).insecure_listener


def test_wildcard_listener_needs_an_advertised_host():
    with pytest.raises(ConfigError, match="proxy.advertised_host: required when proxy.listen_host is '0.0.0.0'"):
        proxy(listen_host="0.0.0.0", **TLS, **SASL)
    gw = proxy(listen_host="0.0.0.0", advertised_host="gw.use1-az1.example", advertised_port=9094, **TLS, **SASL)
    assert gw.advertised == ("gw.use1-az1.example", 9094)


@pytest.mark.parametrize("settings, message", [
    ({"workers": 0}, "proxy.workers: 1..256"),
    ({"workers": 257}, "proxy.workers: 1..256"),
    ({"advertised_port": 70000}, "proxy.advertised_port: 70000 is not a port"),
])
def test_ranges(settings, message):
    with pytest.raises(ConfigError, match=message):
        proxy(**settings)


def test_worker_config_gives_each_worker_its_own_id_and_status_port():
    config = Config(proxy=proxy(proxy_id="gw-az1-a", workers=3, metrics_port=9464, listen_port=0))
    w2 = worker_config(config, 2, 19092)
    assert (w2.proxy.proxy_id, w2.proxy.metrics_port, w2.proxy.listen_port, w2.proxy.workers) == (
        "gw-az1-a-w2", 9466, 19092, 3)
    assert worker_config(Config(proxy=proxy(workers=2)), 1, 9092).proxy.metrics_port == 0  # off stays off
    assert config.proxy.proxy_id == "gw-az1-a"  # the original is untouched


@pytest.mark.parametrize(("settings", "passthrough"), [
    ({}, True),  # a loopback sidecar: its own clients reach listeners on ephemeral ports
    ({"listen_host": "::1"}, True),
    ({"broker_listeners": False}, False),  # turned off
    ({"advertised_host": "gw.use1-az1.internal"}, False),  # behind a load balancer: ports it does not forward
    ({"workers": 2}, False),  # SO_REUSEPORT workers: each would open ports of its own
    ({"listen_host": "10.0.0.5", "insecure_listener": True}, False),  # a gateway
    ({"listen_host": "10.0.0.5", "insecure_listener": True, "broker_listeners": True}, True),  # explicitly on
])
def test_pass_through_is_on_by_default_where_the_listeners_can_be_reached(settings, passthrough):
    assert ProxyConfig(**settings).passthrough is passthrough
