"""One secrets policy for every subcommand: secrets come from the environment or from files
only their owner can read; never from the TOML file; no repr shows one."""

from __future__ import annotations

import os

import pytest

from azsidecar.config import load_config
from azsidecar.secrets import read_hmac_keys, resolve_secrets
from core.configload import ConfigError
from core.tls import read_secret_file, server_context
from proxy.config import ProxyConfig
from proxy.startup import listener_security

KEY_A = "first-key-0123456789"
KEY_B = "second-key-0123456789"
PASSWORD = "s3cr3t-sasl-password"
SASL = {"upstream.security_protocol": "SASL_PLAINTEXT", "upstream.sasl_mechanism": "PLAIN",
        "upstream.sasl_username": "sidecar"}


def private_file(path, text: str, mode: int = 0o600):
    path.write_text(text)
    os.chmod(path, mode)
    return path


@pytest.mark.parametrize(("toml", "setting"), [
    ('[notify]\nhmac_keys = ["first-key-0123456789"]\n', "notify.hmac_keys"),
    ('[upstream]\nsasl_password = "s3cr3t"\n', "upstream.sasl_password"),
])
def test_a_secret_in_the_config_file_is_refused_with_its_name(tmp_path, toml, setting):
    path = tmp_path / "c.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError, match=f"{setting} in {path}: secrets are not read from the config file"):
        load_config(path)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660])
def test_a_key_file_readable_by_others_is_refused_with_path_and_mode(tmp_path, mode):
    keys = private_file(tmp_path / "keys", f"{KEY_A}\n", mode)
    with pytest.raises(ConfigError, match=f"notify.hmac_key_file: {keys} has mode {mode:04o}"):
        read_hmac_keys(str(keys), {})


def test_key_file_wins_over_the_environment_and_keeps_its_order(tmp_path):
    keys = private_file(tmp_path / "keys", f"{KEY_B}\n\n{KEY_A}\n")
    assert read_hmac_keys(str(keys), {"AZSIDECAR_NOTIFY_HMAC_KEYS": KEY_A}) == (KEY_B, KEY_A)
    assert read_hmac_keys(None, {"AZSIDECAR_NOTIFY_HMAC_KEYS": f"{KEY_A}, {KEY_B}"}) == (KEY_A, KEY_B)
    assert read_hmac_keys(None, {}) == ()


def test_an_empty_key_file_is_refused(tmp_path):
    keys = private_file(tmp_path / "keys", "\n")
    with pytest.raises(ConfigError, match="holds no key"):
        read_hmac_keys(str(keys), {})


def test_the_flag_wins_over_the_setting(tmp_path):
    flag = private_file(tmp_path / "flag", f"{KEY_A}\n")
    setting = private_file(tmp_path / "setting", f"{KEY_B}\n")
    config = resolve_secrets(load_config(overrides={"notify.hmac_key_file": str(setting)}), {}, str(flag))
    assert config.notify.hmac_keys == (KEY_A,)
    config = resolve_secrets(load_config(overrides={"notify.hmac_key_file": str(setting)}), {})
    assert config.notify.hmac_keys == (KEY_B,)


def test_no_repr_shows_a_secret(tmp_path):
    password = private_file(tmp_path / "password", f"{PASSWORD}\n")
    config = resolve_secrets(load_config(overrides={**SASL, "upstream.sasl_password_file": str(password)}),
                             {"AZSIDECAR_NOTIFY_HMAC_KEYS": KEY_A})
    assert config.notify.hmac_keys == (KEY_A,) and config.upstream.sasl_password == PASSWORD
    for text in (repr(config), str(config), repr(config.notify), repr(config.upstream)):
        assert KEY_A not in text and PASSWORD not in text


def test_a_password_file_readable_by_group_is_refused(tmp_path):
    password = private_file(tmp_path / "password", f"{PASSWORD}\n", 0o640)
    with pytest.raises(ConfigError, match=f"upstream.sasl_password_file: {password} has mode 0640"):
        read_secret_file(str(password), "upstream.sasl_password_file")


def test_listener_private_key_and_users_file_must_be_private(tmp_path):
    key = private_file(tmp_path / "key.pem", "not a key", 0o644)
    with pytest.raises(ConfigError, match=f"proxy.tls_key_file: {key} has mode 0644"):
        server_context(str(tmp_path / "cert.pem"), str(key))
    users = private_file(tmp_path / "users.toml", "", 0o644)
    with pytest.raises(ConfigError, match=f"proxy.sasl_users_file: {users} has mode 0644"):
        listener_security(ProxyConfig(sasl_mechanisms=("PLAIN",), sasl_users_file=str(users)))
