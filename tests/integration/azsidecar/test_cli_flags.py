"""Every flag's bad value ends in one readable line and exit code 2, never a traceback.

A flag that sets a config key gets the key's own check (the message names the key); any
other flag is checked by argparse when parsed (a usage error naming the flag).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from azsidecar import demo, fleet_demo
from azsidecar.cli import build_parser
from core.configload import ConfigError

CLI_TIMEOUT_S = 60


def run_cli(*argv: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AZSIDECAR_NOTIFY")}
    return subprocess.run([sys.executable, "-m", "azsidecar", *argv], capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S, env=env, check=False)


def test_proxy_log_level_verbose_is_a_usage_error_not_a_traceback():
    done = run_cli("proxy", "--log-level", "verbose")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "argument --log-level: 'verbose' is not one of DEBUG, INFO, WARNING, ERROR" in done.stderr


@pytest.mark.parametrize("argv,message", [
    # flags that set config keys: the key's own message
    (["proxy", "--metrics-port", "70000"], "proxy.metrics_port: 70000 is not a port"),
    (["agent", "--zone", "use1-az2", "--listen", "nohostport"], "--listen: expected HOST:PORT, got 'nohostport'"),
    (["gc", "--bucket", "b", "--interval-s", "-1"], "wal.gc_interval_s: must be > 0"),
    (["gc", "--bucket", "b", "--once", "--endpoint-url", "localhost:9000"],
     "wal.endpoint_url: 'localhost:9000' is not an http:// or https:// URL with a host"),
    (["recover", "--zone", "use1-az1", "--writer-id", "a/b"], "proxy.proxy_id: non-empty, no '/'"),
    (["proxy", "--zone", "us-east-1a"], "zone: 'us-east-1a' is an AZ name, not an AZ id"),
    (["agent", "--zone", "eu-west-1b"], "zone: 'eu-west-1b' is an AZ name, not an AZ id"),
])
def test_flags_that_set_config_keys_get_the_keys_checks(argv, message):
    done = run_cli(*argv)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert f"azsidecar: configuration error: {message}" in done.stderr


@pytest.mark.parametrize("argv,message", [
    (["proxy", "--log-level", "loud"], "argument --log-level: 'loud' is not one of DEBUG, INFO, WARNING, ERROR"),
    (["agent", "--log-level", "trace"], "argument --log-level: 'trace' is not one of"),
    (["gc", "--log-level", "x"], "argument --log-level: 'x' is not one of"),
    (["recover", "--log-level", "x"], "argument --log-level: 'x' is not one of"),
    (["audit", "all", "--input", "i", "--output", "o", "--log-level", "x"], "argument --log-level: 'x' is not one of"),
    (["proxy", "--metrics-port", "ninety"], "argument --metrics-port: invalid int value: 'ninety'"),
    (["proxy-user", ""], "argument username: '': a non-empty name"),
    (["demo", "--mb", "-5"], "argument --mb: -5 is not a number > 0"),
    (["demo", "--mb", "nan"], "argument --mb: nan is not a number > 0"),
    (["demo", "--record-bytes", "8"], "argument --record-bytes: 8 is below 32"),
    (["demo", "--fleet", "--heavy", "-1"], "argument --heavy: -1 is below 0"),
    (["demo", "--fleet", "--small-per-zone", "two"], "argument --small-per-zone: 'two' is not an integer"),
    (["demo", "--fleet", "--small-kbps", "0"], "argument --small-kbps: 0 is not a number > 0"),
    (["demo", "--fleet", "--heavy-mbps", "inf"], "argument --heavy-mbps: inf is not a number > 0"),
    (["demo", "--fleet", "--duration-s", "0"], "argument --duration-s: 0 is not a number > 0"),
    (["plan", "--profile", "p.csv", "--batch-bytes", "0"], "argument --batch-bytes: 0 is below 1"),
    (["status", "--port", "70000"], "argument --port: 70000 is not a port (0..65535)"),
    (["status", "--port", "-1"], "argument --port: -1 is not a port (0..65535)"),
    (["status", "--port", "1", "--host", "a b"], "argument --host: 'a b' is not a host name or address"),
    (["status", "--port", "1", "--wait-s", "-2"], "argument --wait-s: -2 is not a number >= 0"),
])
def test_other_flags_are_usage_errors_when_parsed(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv,value", [
    (["proxy", "--log-level", "debug"], "DEBUG"),
    (["gc", "--log-level", "Warning"], "WARNING"),
])
def test_log_level_is_taken_in_any_case_as_the_config_takes_it(argv, value):
    assert build_parser().parse_args(argv).log_level == value


def _refuse_to_start(*_args, **_kwargs):
    raise AssertionError("started a demo although its flags are invalid")


def test_demo_refuses_less_than_one_record_before_starting_anything(monkeypatch):
    monkeypatch.setattr(demo, "run_demo", _refuse_to_start)
    args = build_parser().parse_args(["demo", "--mb", "0.0005", "--record-bytes", "1000"])  # 500 bytes
    with pytest.raises(ConfigError, match=r"--mb 0.0005: less than one record of --record-bytes 1000"):
        demo.main(args)


def test_fleet_demo_refuses_no_producers_before_starting_anything(monkeypatch):
    monkeypatch.setattr(fleet_demo, "three_zones", _refuse_to_start)
    args = build_parser().parse_args(["demo", "--fleet", "--small-per-zone", "0", "--heavy", "0"])
    assert isinstance(args, argparse.Namespace)
    with pytest.raises(ConfigError, match="at least one producer"):
        fleet_demo.main(args)
