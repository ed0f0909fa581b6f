"""Every config key can be set by an AZSIDECAR__SECTION__KEY variable, checked as in the file.

Precedence: flags, then variables, then the file, then the defaults. Values are TOML values
where they parse as one, else strings.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from azsidecar.config import load_config, load_config_with_origins
from azsidecar.config_layers import env_name, parse_env_value
from core.configload import ConfigError

FILE = """
zone = "use1-az1"
[wal]
bucket = "file-bucket"
linger_ms = 250
[router]
broker_zones = { "1" = "use1-az1", "2" = "use1-az2" }
"""


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "azsidecar.toml"
    path.write_text(FILE)
    return path


def test_the_variable_name_is_the_key_path_in_upper_case_joined_by_double_underscores():
    assert env_name(("wal", "linger_ms")) == "AZSIDECAR__WAL__LINGER_MS"
    assert env_name(("zone",)) == "AZSIDECAR__ZONE"
    assert env_name(("router", "prices", "s3_put_per_1000")) == "AZSIDECAR__ROUTER__PRICES__S3_PUT_PER_1000"


@pytest.mark.parametrize("raw,value", [
    ("100", 100),
    ("1.5", 1.5),
    ("true", True),
    ('["a:9092", "b:9092"]', ["a:9092", "b:9092"]),
    ('{ "1" = "use1-az1" }', {"1": "use1-az1"}),
    ('"123"', "123"),  # quoted: a string that would otherwise be a number
    ("use1-az1", "use1-az1"),  # not TOML: the string as it is
    ("a:9092,b:9092", "a:9092,b:9092"),
    ("", ""),
    ("1\nlog_level = 'DEBUG'", "1\nlog_level = 'DEBUG'"),  # one value or nothing: no smuggled keys
])
def test_a_value_is_a_toml_value_where_it_parses_else_a_string(raw, value):
    assert parse_env_value(raw) == value


def test_variables_override_the_file_and_flags_override_variables(config_file):
    environ = {
        "AZSIDECAR__WAL__BUCKET": "env-bucket",
        "AZSIDECAR__WAL__LINGER_MS": "100",
        "AZSIDECAR__WAL__REGION": "eu-west-1",
        "AZSIDECAR__ZONE": "use1-az2",
        "AZSIDECAR__UPSTREAM__BOOTSTRAP_SERVERS": "b-1:9092,b-2:9092",
        "AZSIDECAR__ROUTER__PRICES__S3_PUT_PER_1000": "0.0025",
        "AZSIDECAR__NOTIFY__AGENTS": '{ "use1-az3" = ["10.0.3.15:9400", "10.0.3.16:9400"] }',
        "azsidecar__wal__prefix": "ignored/",  # the prefix is upper case
        "AZSIDECAR_WAL_PREFIX": "ignored/",  # single underscores: not this rule
    }
    config = load_config(config_file, {"zone": "use1-az3"}, environ)
    assert config.zone == "use1-az3"  # the flag
    assert config.wal.bucket == "env-bucket"
    assert config.wal.linger_ms == 100
    assert config.wal.region == "eu-west-1"
    assert config.wal.prefix == ""  # the default
    assert config.upstream.bootstrap_servers == ("b-1:9092", "b-2:9092")
    assert config.router.prices.s3_put_per_1000 == 0.0025
    assert config.notify.agents["use1-az3"] == ("10.0.3.15:9400", "10.0.3.16:9400")
    assert dict(config.router.broker_zones) == {"1": "use1-az1", "2": "use1-az2"}  # the file's


def test_key_levels_may_be_written_in_lower_case():
    assert load_config(environ={"AZSIDECAR__wal__linger_ms": "42"}).wal.linger_ms == 42


def test_a_variable_adds_one_entry_to_a_table_of_the_file_or_replaces_it_whole(config_file):
    added = load_config(config_file, environ={"AZSIDECAR__ROUTER__BROKER_ZONES__3": "use1-az3"})
    assert dict(added.router.broker_zones) == {"1": "use1-az1", "2": "use1-az2", "3": "use1-az3"}
    replaced = load_config(config_file, environ={"AZSIDECAR__ROUTER__BROKER_ZONES": '{ "7" = "use1-az3" }'})
    assert dict(replaced.router.broker_zones) == {"7": "use1-az3"}


@pytest.mark.parametrize("environ,message", [
    ({"AZSIDECAR__WAL__MAX_BYTES": "8MiB"},
     "wal.max_bytes: expected an integer, got '8MiB' (set by $AZSIDECAR__WAL__MAX_BYTES)"),
    ({"AZSIDECAR__WAL__MAX_BYTES": "1000"}, "wal.max_bytes: 64 KiB..5 GiB (set by $AZSIDECAR__WAL__MAX_BYTES)"),
    ({"AZSIDECAR__ROUTER__POLICY": "cheapest"}, "router.policy: must be one of 'cost', 'wal', 'direct', got 'cheapest'"),
    ({"AZSIDECAR__WAL__LINGERMS": "5"}, "wal.lingerms: unknown setting"),
    ({"AZSIDECAR__LOG_LEVEL": "verbose"}, "log_level: DEBUG|INFO|WARNING|ERROR"),
    ({"AZSIDECAR__ZONE": "us-east-1a"}, "zone: 'us-east-1a' is an AZ name, not an AZ id"),
])
def test_a_variable_gets_the_files_checks_and_the_message_names_it(environ, message):
    with pytest.raises(ConfigError) as info:
        load_config(environ=environ)
    assert message in str(info.value)
    assert str(info.value).endswith(f"(set by ${next(iter(environ))})")


def test_a_bad_flag_over_a_good_variable_is_not_blamed_on_the_variable():
    with pytest.raises(ConfigError) as info:
        load_config(overrides={"zone": "us-east-1a"}, environ={"AZSIDECAR__ZONE": "use1-az1"})
    assert str(info.value).startswith("zone: 'us-east-1a' is an AZ name")
    assert "AZSIDECAR__ZONE" not in str(info.value)


@pytest.mark.parametrize("environ,message", [
    ({"AZSIDECAR__NOTIFY__HMAC_KEYS": "k" * 32},
     "$AZSIDECAR__NOTIFY__HMAC_KEYS: notify.hmac_keys is a secret, not read from a variable of this form; "
     "use notify.hmac_key_file or $AZSIDECAR_NOTIFY_HMAC_KEYS"),
    ({"AZSIDECAR__UPSTREAM__SASL_PASSWORD": "hunter2"},
     "$AZSIDECAR__UPSTREAM__SASL_PASSWORD: upstream.sasl_password is a secret"),
    ({"AZSIDECAR__UPSTREAM": '{ sasl_password = "hunter2" }'}, "$AZSIDECAR__UPSTREAM: upstream.sasl_password is a secret"),
])
def test_secrets_keep_their_own_variables_and_files(environ, message):
    with pytest.raises(ConfigError) as info:
        load_config(environ=environ)
    assert message in str(info.value)
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize("environ,message", [
    ({"AZSIDECAR__WAL____LINGER_MS": "1"}, "$AZSIDECAR__WAL____LINGER_MS: a config key's levels are separated by one '__'"),
    ({"AZSIDECAR__ZONE__A": "1"}, "zone is not a table, so $AZSIDECAR__ZONE__A cannot set zone.a"),
])
def test_malformed_names_are_config_errors(config_file, environ, message):
    with pytest.raises(ConfigError) as info:
        load_config(config_file, environ=environ)
    assert message in str(info.value)


def test_each_setting_says_where_its_value_came_from(config_file):
    environ = {"AZSIDECAR__WAL__LINGER_MS": "100", "AZSIDECAR__ROUTER__BROKER_ZONES__3": "use1-az3",
               "AZSIDECAR__ROUTER__PRICES": "{ s3_put_per_1000 = 0.004 }"}
    _, origin = load_config_with_origins(config_file, {"proxy.listen_port": 19092}, environ)
    assert origin["zone"] == "file"
    assert origin["wal.bucket"] == "file"
    assert origin["wal.linger_ms"] == "$AZSIDECAR__WAL__LINGER_MS"
    assert origin["wal.prefix"] == "default"
    assert origin["router.broker_zones"] == "file + $AZSIDECAR__ROUTER__BROKER_ZONES__3"
    assert origin["router.prices.s3_put_per_1000"] == "$AZSIDECAR__ROUTER__PRICES"
    assert origin["router.prices.s3_get_per_1000"] == "default"
    assert origin["proxy.listen_port"] == "command line"


def test_the_cli_reads_the_variables(tmp_path):
    env = {**os.environ, "AZSIDECAR__ZONE": "us-east-1a", "AZSIDECAR__LOG_LEVEL": "debug"}
    done = subprocess.run([sys.executable, "-m", "azsidecar", "proxy"], capture_output=True, text=True,
                          timeout=60, env=env, check=False)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "azsidecar: configuration error: zone: 'us-east-1a' is an AZ name" in done.stderr
    assert done.stderr.rstrip().endswith("(set by $AZSIDECAR__ZONE)")
