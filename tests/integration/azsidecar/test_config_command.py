"""`azsidecar config validate` (one line, exit 0 or 2) and `config show` (the effective
config as TOML, each value's origin after it, secrets never printed)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tomllib

import pytest

from azsidecar.config import load_config, load_config_with_origins
from azsidecar.config_show import render, toml_value

GOOD = """
zone = "use1-az1"
[upstream]
bootstrap_servers = "b-1:9092,b-2:9092"
[router]
broker_zones = { "1" = "use1-az1" }
[notify]
agents = { "use1-az2" = "10.0.2.15:9400" }
[wal]
bucket = "acme-wal-use1"
region = "us-east-1"
"""
SECRET = "hunter2-not-to-be-printed"


def run_config(*argv: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AZSIDECAR_")}
    environ["AZSIDECAR_IMDS_ENDPOINT"] = os.environ.get("AZSIDECAR_IMDS_ENDPOINT", "http://127.0.0.1:9")
    return subprocess.run([sys.executable, "-m", "azsidecar", "config", *argv], capture_output=True, text=True,
                          timeout=60, env={**environ, **env}, check=False)


@pytest.fixture
def good(tmp_path):
    path = tmp_path / "good.toml"
    path.write_text(GOOD)
    return path


def test_validate_says_ok_in_one_line(good):
    done = run_config("validate", "--config", str(good))
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{good}: OK\n", "")


def test_validate_names_the_variables_it_applied(good):
    done = run_config("validate", "--config", str(good), AZSIDECAR__WAL__BUCKET="acme-wal")
    assert (done.returncode, done.stdout) == (0, f"{good}: OK, with $AZSIDECAR__WAL__BUCKET\n")


@pytest.mark.parametrize("text,env,message", [
    ("[wal]\nmax_bytes = 1000\n", {}, "wal.max_bytes: 64 KiB..5 GiB"),
    ('zone = "us-east-1a"\n', {}, "zone: 'us-east-1a' is an AZ name, not an AZ id"),
    ("[wal]\nmax_bytes = \n", {}, "config file"),
    ("", {"AZSIDECAR__ROUTER__POLICY": "cheapest"}, "router.policy: must be one of 'cost', 'wal', 'direct', "
                                                    "got 'cheapest' (set by $AZSIDECAR__ROUTER__POLICY)"),
    ('[upstream]\nsasl_password = "x"\n', {}, "upstream.sasl_password in"),
])
def test_validate_prints_the_error_and_exits_2(tmp_path, text, env, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    done = run_config("validate", "--config", str(path), **env)
    assert done.returncode == 2
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(f"azsidecar: configuration error: {message}")
    assert done.stderr.count("\n") == 1


def test_show_prints_each_value_with_its_origin_and_no_secret(good):
    done = run_config("show", "--config", str(good), AZSIDECAR__WAL__BUCKET="acme-wal",
                      AZSIDECAR__PROXY__LISTEN_PORT="19092", AZSIDECAR_UPSTREAM_SASL_PASSWORD=SECRET,
                      AZSIDECAR_NOTIFY_HMAC_KEYS=SECRET)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for line in [
        'zone = "use1-az1"  # file',
        'log_level = "INFO"  # default',
        "[proxy]",
        "listen_port = 19092  # $AZSIDECAR__PROXY__LISTEN_PORT",
        "# broker_listeners: unset  # default",
        "[upstream]",
        'bootstrap_servers = ["b-1:9092", "b-2:9092"]  # file',
        "# sasl_password = <redacted>  # $AZSIDECAR_UPSTREAM_SASL_PASSWORD",
        "[router]",
        'broker_zones = { "1" = "use1-az1" }  # file',
        "zone_brokers = {}  # default",
        "[router.prices]",
        "s3_put_per_1000 = 0.005  # default",
        "[wal]",
        'bucket = "acme-wal"  # $AZSIDECAR__WAL__BUCKET',
        "[notify]",
        'agents = { "use1-az2" = "10.0.2.15:9400" }  # file',
        "# hmac_keys = <redacted>  # $AZSIDECAR_NOTIFY_HMAC_KEYS",
    ]:
        assert line in lines, line
    assert lines.index("[router]") < lines.index("[router.prices]") < lines.index("[wal]")
    assert SECRET not in done.stdout and SECRET not in done.stderr


def test_show_says_where_a_secret_would_come_from_or_that_none_is_given(tmp_path):
    path = tmp_path / "files.toml"
    path.write_text('[notify]\nhmac_key_file = "/etc/azsidecar/keys"\n')
    done = run_config("show", "--config", str(path))
    assert "# hmac_keys = <redacted>  # from notify.hmac_key_file" in done.stdout.splitlines()
    assert "# sasl_password: a secret, none given" in done.stdout.splitlines()


def test_a_secret_in_the_config_object_is_redacted_too():
    config, origins = load_config_with_origins(overrides={"notify.hmac_keys": [SECRET * 2]})
    text = render(config, origins, {})
    assert SECRET not in text
    assert "# hmac_keys = <redacted>  # command line" in text.splitlines()


def test_what_show_prints_loads_back_to_the_same_config(good, tmp_path):
    environ = {"AZSIDECAR__WAL__LINGER_MS": "100", "AZSIDECAR__ROUTER__PARTITION_ZONES": '{ "orders:*" = "use1-az2" }',
               "AZSIDECAR__PROXY__BROKER_LISTENERS": "false"}
    config, origins = load_config_with_origins(good, None, environ)
    shown = tmp_path / "shown.toml"
    shown.write_text(render(config, origins, {}))
    assert load_config(shown) == config
    assert dataclasses.replace(config, zone="use1-az9") != config  # the comparison can fail


@pytest.mark.parametrize("value", ['quote " backslash \\ tab \t newline \n', "ünïcode", "", 1.5, -0.25, 3, True,
                                   float("inf"), ["a", "b"], {"k.1": "v", "2": ["x"]}])
def test_toml_value_round_trips(value):
    assert tomllib.loads(f"v = {toml_value(value)}")["v"] == value
