"""Security settings: validation, and secrets that come only from files or the environment."""

from __future__ import annotations

import pytest

from azsidecar.config import load_config
from azsidecar.secrets import apply_secrets
from core.configload import ConfigError
from kafka_upstream.config import UpstreamConfig


@pytest.mark.parametrize("overrides,message", [
    ({"proxy.tls_cert_file": "/c.pem"}, "proxy.tls_cert_file and proxy.tls_key_file: give both or neither"),
    ({"proxy.sasl_mechanisms": ["GSSAPI"], "proxy.sasl_users_file": "/u"}, "'GSSAPI' is not one of"),
    ({"proxy.sasl_mechanisms": ["PLAIN"]}, "proxy.sasl_mechanisms and proxy.sasl_users_file: give both"),
    ({"upstream.security_protocol": "TLS"}, "upstream.security_protocol: must be one of"),
    ({"upstream.security_protocol": "SASL_SSL"}, "upstream.sasl_mechanism: required with security_protocol SASL_*"),
    ({"upstream.sasl_mechanism": "PLAIN"}, "upstream.sasl_mechanism: required with security_protocol SASL_*, not"),
    ({"upstream.security_protocol": "SASL_SSL", "upstream.sasl_mechanism": "PLAIN"}, "upstream.sasl_username"),
])
def test_bad_security_settings_name_their_key(overrides, message):
    with pytest.raises(ConfigError) as info:
        load_config(overrides=overrides)
    assert message in str(info.value)


def test_listener_defaults_to_loopback_plaintext_without_sasl():
    config = load_config()
    assert config.proxy.listen_host == "127.0.0.1"
    assert (config.proxy.tls_cert_file, config.proxy.sasl_mechanisms) == ("", ())
    assert config.upstream.security_protocol == "PLAINTEXT"


SASL = {"upstream.security_protocol": "SASL_SSL", "upstream.sasl_mechanism": "SCRAM-SHA-512",
        "upstream.sasl_username": "sidecar"}


def test_password_in_the_config_file_is_refused(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[upstream]\nsecurity_protocol = "SASL_SSL"\nsasl_mechanism = "PLAIN"\n'
                    'sasl_username = "u"\nsasl_password = "in-the-file"\n')
    with pytest.raises(ConfigError, match=f"upstream.sasl_password in {path}: secrets are not read from the config"):
        load_config(str(path))


def test_password_from_file_wins_over_the_environment_and_stays_out_of_repr(tmp_path):
    secret = tmp_path / "pw"
    secret.write_text("file-Secret-1\nsecond line ignored\n")
    secret.chmod(0o600)
    config = apply_secrets(load_config(overrides={**SASL, "upstream.sasl_password_file": str(secret)}),
                           {"AZSIDECAR_UPSTREAM_SASL_PASSWORD": "env-Secret-2"})
    assert config.upstream.sasl_password == "file-Secret-1"
    assert "file-Secret-1" not in repr(config) and "file-Secret-1" not in repr(config.upstream)


def test_password_from_the_environment_and_missing_password(tmp_path):
    config = apply_secrets(load_config(overrides=SASL), {"AZSIDECAR_UPSTREAM_SASL_PASSWORD": "env-Secret-2"})
    assert config.upstream.sasl_password == "env-Secret-2"
    with pytest.raises(ConfigError, match="AZSIDECAR_UPSTREAM_SASL_PASSWORD"):
        apply_secrets(load_config(overrides=SASL), {})
    with pytest.raises(ConfigError, match="upstream.sasl_password_file: cannot read"):
        apply_secrets(load_config(overrides={**SASL, "upstream.sasl_password_file": str(tmp_path / "none")}), {})
    assert apply_secrets(load_config(), {"AZSIDECAR_UPSTREAM_SASL_PASSWORD": "x"}).upstream.sasl_password == ""


def test_unreadable_listener_files_are_config_errors(tmp_path):
    from proxy.config import ProxyConfig
    from proxy.startup import listener_security

    with pytest.raises(ConfigError, match="proxy.tls_key_file: cannot read"):
        listener_security(ProxyConfig(tls_cert_file=str(tmp_path / "c"), tls_key_file=str(tmp_path / "k")))
    (tmp_path / "k").write_text("not a key")
    (tmp_path / "k").chmod(0o600)
    with pytest.raises(ConfigError, match="proxy.tls_cert_file/tls_key_file: cannot load"):
        listener_security(ProxyConfig(tls_cert_file=str(tmp_path / "c"), tls_key_file=str(tmp_path / "k")))
    bad = tmp_path / "users.toml"
    bad.write_text("[users.bob.PLAIN]\nsalt='x'\n")
    bad.chmod(0o600)
    with pytest.raises(ConfigError, match="proxy.sasl_users_file: users.bob.PLAIN: mechanism must be one of"):
        listener_security(ProxyConfig(sasl_mechanisms=("PLAIN",), sasl_users_file=str(bad)))
    with pytest.raises(ConfigError, match="proxy.sasl_users_file: cannot read"):
        listener_security(ProxyConfig(sasl_mechanisms=("PLAIN",), sasl_users_file=str(tmp_path / "none")))


def test_tls_upstream_config_flags():
    assert UpstreamConfig(security_protocol="SSL").tls
    assert not UpstreamConfig(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="u").tls
