"""The one configuration object: the README's example loads, bad values name their key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from azsidecar.config import load_config, require_bootstrap_servers
from core.configload import ConfigError

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_example_loads(tmp_path):
    block = re.search(r"```toml\n(.*?)```", README.read_text(), re.S).group(1)
    path = tmp_path / "azsidecar.toml"
    path.write_text(block)
    config = load_config(path)
    assert config.zone == "use1-az1"
    assert config.router.policy == "cost"
    assert config.router.partition_zones["orders:*"] == "use1-az2"
    assert config.wal.max_bytes == 8 * 1024 * 1024
    assert config.notify.agents["use1-az3"] == ("10.0.3.15:9400", "10.0.3.16:9400")
    assert config.upstream.bootstrap_servers == ("b-1.msk.example:9092",)


@pytest.mark.parametrize("overrides,message", [
    ({"wal.max_bytes": "8MiB"}, "wal.max_bytes: expected an integer"),
    ({"wal.max_bytes": 1000}, "wal.max_bytes: 64 KiB..5 GiB"),
    ({"router.policy": "cheapest"}, "router.policy: must be one of"),
    ({"proxy.listen_port": 70000}, "proxy.listen_port: 70000 is not a port"),
    ({"upstream.bootstrap_servers": ["nohostport"]}, "upstream.bootstrap_servers: 'nohostport' is not host:port"),
    ({"wal.lingerms": 5}, "wal.lingerms: unknown setting"),
    ({"router.ack_modes": {"t": "eventually"}}, "router.ack_modes.t: 'leader' or 'wal'"),
    ({"router.zone_brokers": {"az1": "x"}}, "router.zone_brokers.az1: 'x' is not host:port"),
    ({"agent.event_loop": "trio"}, "agent.event_loop: 'trio' is not one of uvloop, asyncio"),
])
def test_bad_values_name_their_key(overrides, message):
    with pytest.raises(ConfigError) as info:
        load_config(overrides=overrides)
    assert message in str(info.value)


def test_missing_file_and_bad_toml_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "absent.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("zone = \n")
    with pytest.raises(ConfigError, match="bad.toml"):
        load_config(bad)


def test_cli_refuses_to_start_without_a_zone_and_says_how_to_fix_it(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "AZSIDECAR_IMDS_ENDPOINT": "http://127.0.0.1:9"}  # closed port: no IMDS
    done = subprocess.run([sys.executable, "-m", "azsidecar", "proxy", "--listen", "127.0.0.1:0",
                           "--bootstrap-servers", "127.0.0.1:9"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2
    assert "pass --zone" in done.stderr and "availability zone" in done.stderr


def test_every_setting_is_documented():
    import dataclasses
    import typing

    from azsidecar.config import Config
    from core.prices import Prices

    doc = (README.parent / "docs" / "configuration.md").read_text()
    missing = []
    hints = typing.get_type_hints(Config)
    for f in dataclasses.fields(Config):
        cls = hints[f.name]
        if dataclasses.is_dataclass(cls):
            missing += [f"{f.name}.{g.name}" for g in dataclasses.fields(cls) if f"`{f.name}.{g.name}`" not in doc
                        and not dataclasses.is_dataclass(typing.get_type_hints(cls)[g.name])]
        elif f"`{f.name}`" not in doc:
            missing.append(f.name)
    missing += [f"router.prices.{g.name}" for g in dataclasses.fields(Prices) if f"`router.prices.{g.name}`" not in doc]
    assert not missing, f"docs/configuration.md lacks {missing}"


@pytest.mark.parametrize("toml_value,expected", [
    ('"a:9092,b:9092"', ("a:9092", "b:9092")),
    ('["a:9092", "b:9092"]', ("a:9092", "b:9092")),
    ('" a:9092 , b:9092, "', ("a:9092", "b:9092")),  # spaces stripped, a trailing comma dropped
    ('"b-1.msk.example:9094"', ("b-1.msk.example:9094",)),
])
def test_bootstrap_servers_takes_kafkas_comma_separated_form_or_a_list(tmp_path, toml_value, expected):
    path = tmp_path / "azsidecar.toml"
    path.write_text(f"[upstream]\nbootstrap_servers = {toml_value}\n")
    assert load_config(path).upstream.bootstrap_servers == expected


@pytest.mark.parametrize("value,message", [
    ("a:9092,nohostport", "upstream.bootstrap_servers: 'nohostport' is not host:port"),
    (9092, "upstream.bootstrap_servers: expected a list, got int"),
])
def test_bad_bootstrap_strings_name_the_bad_item(value, message):
    with pytest.raises(ConfigError) as info:
        load_config(overrides={"upstream.bootstrap_servers": value})
    assert message in str(info.value)


def test_an_empty_bootstrap_list_is_no_cluster_and_a_command_that_talks_to_kafka_refuses_it():
    config = load_config(overrides={"upstream.bootstrap_servers": " , "})
    assert config.upstream.bootstrap_servers == ()
    with pytest.raises(ConfigError, match="^upstream.bootstrap_servers: must be set: there is no default cluster"):
        require_bootstrap_servers(config, "proxy")


AZ_NAME_MESSAGE = "is an AZ name, not an AZ id: give the id (the use1-az1 form"


@pytest.mark.parametrize("overrides,key_and_value", [
    ({"zone": "us-east-1a"}, "zone: 'us-east-1a'"),
    ({"zone": "eu-central-1c"}, "zone: 'eu-central-1c'"),
    ({"zone": "us-gov-west-1a"}, "zone: 'us-gov-west-1a'"),
    ({"zone": "us-west-2-lax-1a"}, "zone: 'us-west-2-lax-1a'"),  # a Local Zone's name
    ({"notify.agents": {"us-east-1b": "10.0.2.15:9400"}}, "notify.agents.us-east-1b: 'us-east-1b'"),
    ({"router.zone_brokers": {"us-east-1b": "b:9092"}}, "router.zone_brokers.us-east-1b: 'us-east-1b'"),
    ({"router.broker_zones": {"2": "us-east-1b"}}, "router.broker_zones.2: 'us-east-1b'"),
    ({"router.partition_zones": {"orders:*": "us-east-1c"}}, "router.partition_zones.orders:*: 'us-east-1c'"),
])
def test_an_az_name_is_refused_with_what_an_az_id_is(overrides, key_and_value):
    with pytest.raises(ConfigError) as info:
        load_config(overrides=overrides)
    assert str(info.value).startswith(f"{key_and_value} {AZ_NAME_MESSAGE}")
    assert "per AWS account" in str(info.value)


def test_an_az_id_in_upper_case_is_refused_with_the_lower_case_form():
    with pytest.raises(ConfigError, match=r"^zone: 'USE1-AZ1' is an AZ id in upper case: .* \('use1-az1'\)$"):
        load_config(overrides={"zone": "USE1-AZ1"})


@pytest.mark.parametrize("zone", ["use1-az1", "euc1-az3", "apne1-az4", "usgw1-az2", "usw2-lax1-az1",
                                  "az2", "z1"])  # AZ ids; other labels (test systems, racks off AWS) pass
def test_az_ids_and_other_zone_labels_are_taken(zone):
    config = load_config(overrides={"zone": zone, "notify.agents": {zone: "10.0.0.1:9400"}, "wal.bucket": "acme-wal", "wal.region": "us-east-1",
                                    "router.broker_zones": {"1": zone}})
    assert (config.zone, list(config.notify.agents), config.router.broker_zones["1"]) == (zone, [zone], zone)
