"""authz settings: validation, the gateway's deny-by-default, pass-through refused with
authorization, and the stale-but-bounded rule of the cluster source."""

from __future__ import annotations

import pytest

from azsidecar.config import load_config
from core.configload import ConfigError
from proxy.acl import AclBinding, AclSet, Operation, PatternType, Permission, ResourceType
from proxy.acl_source import DENY_ALL, Snapshot, acls_in_force
from proxy.config import AuthzConfig, ProxyConfig

GATEWAYS = [
    ProxyConfig(listen_host="127.0.0.1", advertised_host="gw.internal"),
    ProxyConfig(listen_host="127.0.0.1", workers=2),
    ProxyConfig(listen_host="10.0.0.1", insecure_listener=True),
]


def test_a_sidecar_left_unset_keeps_every_client_at_the_sidecars_rights():
    assert AuthzConfig().effective_source(ProxyConfig()) == "none"


@pytest.mark.parametrize("proxy", GATEWAYS)
def test_a_gateway_left_unset_denies(proxy):
    assert AuthzConfig().effective_source(proxy) == "deny"
    assert AuthzConfig(source="none").effective_source(proxy) == "none"
    assert AuthzConfig(source="cluster").effective_source(proxy) == "cluster"


@pytest.mark.parametrize(("settings", "message"), [
    ({"source": "ldap"}, "authz.source: 'ldap' is not one of none, cluster, file"),
    ({"source": "file"}, "authz.acl_file: required with authz.source \"file\""),
    ({"source": "cluster", "acl_file": "/x"}, "authz.acl_file: required with authz.source \"file\", not allowed"),
    ({"super_users": ("ops",)}, "authz.super_users: 'ops' is not a principal"),
    ({"super_users": ("User:*",)}, "authz.super_users: 'User:\\*' is not a principal"),
    ({"refresh_interval_s": 0}, "authz.refresh_interval_s: must be > 0"),
    ({"refresh_interval_s": 60, "max_stale_s": 30}, "authz.max_stale_s: must be >= authz.refresh_interval_s"),
])
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(ConfigError, match=message):
        AuthzConfig(**settings)


def test_authorization_turns_pass_through_off_and_refuses_it_when_asked_for():
    assert load_config(overrides={}).proxy.passthrough  # a loopback sidecar passes through by default
    config = load_config(overrides={"authz.source": "cluster"})
    assert not config.proxy.passthrough
    with pytest.raises(ConfigError, match="proxy.broker_listeners: not with authorization"):
        load_config(overrides={"authz.source": "cluster", "proxy.broker_listeners": True})


def test_the_last_acls_serve_until_max_stale_s_then_nothing_is_allowed():
    rules = AclSet.of([AclBinding("User:a", "*", Operation.WRITE, Permission.ALLOW, ResourceType.TOPIC,
                                  PatternType.LITERAL, "t")])
    last = Snapshot(rules, read_at=100.0)
    assert acls_in_force(None, 0.0, 300.0) is DENY_ALL
    assert acls_in_force(last, 100.0, 300.0) is rules
    assert acls_in_force(last, 400.0, 300.0) is rules  # exactly max_stale_s old: still served
    assert acls_in_force(last, 400.5, 300.0) is DENY_ALL
