"""Where records go has no default: the cluster (upstream.bootstrap_servers), the WAL bucket and
its region (wal.bucket, wal.region) are named by the operator, and a command that needs one
stops with a line naming the key and the variable that sets it."""

from __future__ import annotations

import logging

import pytest

# The runners are imported here, at collection: importing proxy/ asks ldconfig for libc (a
# subprocess), which the unit tier refuses while a test runs.
import azsidecar.run_agent
import azsidecar.run_gc
import azsidecar.run_plan_leaders
import azsidecar.run_proxy
import azsidecar.run_recover
from azsidecar.cli import main as azsidecar_main
from azsidecar.config import load_config, require_bootstrap_servers, require_wal_location
from core.configload import ConfigError
from wal_s3.config import WalConfig

NO_BOOTSTRAP = ("upstream.bootstrap_servers: must be set: there is no default cluster; name its brokers "
                "(host:port, e.g. b-1.msk.example:9092), in the config file, as "
                "AZSIDECAR__UPSTREAM__BOOTSTRAP_SERVERS or with --bootstrap-servers")
NO_REGION = ("wal.region: must be set: there is no default region; name the region of wal.bucket "
             "(e.g. us-east-1), in the config file or as AZSIDECAR__WAL__REGION")
NO_BUCKET_START = "wal.bucket: must be set: there is no default bucket"
AGENTS_WHY = "; it is needed here because notify.agents names agents (the WAL route is on)"


@pytest.fixture(autouse=True)
def _no_config_variables(monkeypatch):
    """The runners read os.environ: no AZSIDECAR__ variable of the host may fill a key in."""
    import os

    for name in [n for n in os.environ if n.upper().startswith("AZSIDECAR")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AZSIDECAR_NOTIFY_HMAC_KEYS", "k" * 32)


@pytest.fixture(autouse=True)
def _restore_logging():
    """The CLI replaces the root logger's handlers; give pytest's back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_nothing_is_filled_in_by_default():
    config = load_config()
    assert config.upstream.bootstrap_servers == ()
    assert (config.wal.bucket, config.wal.region) == ("", "")


def test_a_command_that_talks_to_kafka_names_the_key_the_variable_and_the_flag():
    with pytest.raises(ConfigError) as info:
        require_bootstrap_servers(load_config(), "proxy")
    assert str(info.value) == f"{NO_BOOTSTRAP} (azsidecar proxy talks to the Kafka cluster)"
    require_bootstrap_servers(load_config(overrides={"upstream.bootstrap_servers": "b-1:9092"}), "proxy")


def test_the_wal_commands_name_the_bucket_first_then_the_region():
    with pytest.raises(ConfigError, match=f"^{NO_BUCKET_START}.* or as AZSIDECAR__WAL__BUCKET "
                                          r"\(azsidecar gc reads or deletes WAL objects; or give --bucket"):
        require_wal_location(load_config(), "gc")
    with pytest.raises(ConfigError) as info:
        require_wal_location(load_config(overrides={"wal.bucket": "acme-wal"}), "agent")
    assert str(info.value) == (f"{NO_REGION} (azsidecar agent reads or deletes WAL objects; "
                               "or give --region where the command has it)")
    require_wal_location(load_config(overrides={"wal.bucket": "acme-wal", "wal.region": "eu-west-1"}), "agent")


def test_naming_agents_turns_the_wal_route_on_and_with_it_the_region():
    agents = {"zone": "use1-az1", "notify.agents": {"use1-az2": "10.0.2.15:9400"}, "wal.bucket": "acme-wal"}
    with pytest.raises(ConfigError) as info:
        load_config(overrides=agents)
    assert str(info.value) == NO_REGION + AGENTS_WHY
    # shadow mode sends everything direct: nothing goes to S3, so nothing is asked
    assert load_config(overrides={**agents, "router.shadow": True}).wal.region == ""
    assert load_config(overrides={**agents, "wal.region": "us-east-1"}).wal.region == "us-east-1"


def test_the_region_variable_fills_the_key():
    config = load_config(overrides={"wal.bucket": "acme-wal"}, environ={"AZSIDECAR__WAL__REGION": "ap-south-1"})
    assert config.wal.region == "ap-south-1"


@pytest.mark.parametrize(("region", "endpoint_url", "ok"), [
    ("us-east-1", None, True),
    ("us-gov-west-1", None, True),
    ("us-east-1a", None, False),  # an AZ name, not a region
    ("US-EAST-1", None, False),
    ("local", None, False),
    ("local", "http://127.0.0.1:9000", True),  # an S3-compatible store names its region freely
])
def test_a_region_on_aws_must_look_like_one(region, endpoint_url, ok):
    if ok:
        assert WalConfig(region=region, endpoint_url=endpoint_url).region == region
    else:
        with pytest.raises(ConfigError, match=f"^wal.region: '{region}' is not an AWS region"):
            WalConfig(region=region, endpoint_url=endpoint_url)


@pytest.mark.parametrize(("argv", "message"), [
    (["proxy", "--zone", "use1-az1"], f"{NO_BOOTSTRAP} (azsidecar proxy talks to the Kafka cluster)"),
    (["agent", "--zone", "use1-az2"], f"{NO_BOOTSTRAP} (azsidecar agent talks to the Kafka cluster)"),
    (["plan", "leaders", "--from-audit", "audit"], f"{NO_BOOTSTRAP} (azsidecar plan leaders talks to the Kafka cluster)"),
    (["agent", "--zone", "use1-az2", "--bootstrap-servers", "b-1:9092"],
     "wal.bucket: must be set: there is no default bucket, since a fixed name may belong to another AWS account; "
     "name a bucket your account owns (and set wal.expected_bucket_owner to your account id), in the config file "
     "or as AZSIDECAR__WAL__BUCKET (azsidecar agent reads or deletes WAL objects; or give --bucket where the "
     "command has it)"),
    (["gc", "--once", "--bucket", "acme-wal"],
     f"{NO_REGION} (azsidecar gc reads or deletes WAL objects; or give --region where the command has it)"),
    (["recover", "--zone", "use1-az1", "--writer-id", "p-1"],
     f"{NO_BUCKET_START}, since a fixed name may belong to another AWS account; name a bucket your account owns "
     "(and set wal.expected_bucket_owner to your account id), in the config file or as AZSIDECAR__WAL__BUCKET "
     "(azsidecar recover reads or deletes WAL objects; or give --bucket where the command has it)"),
    (["proxy", "--zone", "use1-az1", "--bootstrap-servers", "b-1:9092"], None),  # the WAL path is off: no bucket asked
])
def test_each_command_stops_before_any_io_with_exit_code_2(argv, message, capsys, monkeypatch):
    if message is None:
        # Past the checks the proxy would connect; the unit tier refuses sockets, so stop it at its first.
        def reached(*_args, **_kwargs):
            raise ConfigError("reached the brokers")
        monkeypatch.setattr(azsidecar.run_proxy, "wait_for_brokers", reached)
        message = "reached the brokers"
    assert azsidecar_main(argv) == 2
    assert capsys.readouterr().err == f"azsidecar: configuration error: {message}\n"
