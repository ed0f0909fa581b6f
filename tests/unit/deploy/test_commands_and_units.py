"""The commands that ECS tasks and systemd units run exist in azsidecar's real CLI, and the
settings objects the modules build use only keys the config module declares."""

from __future__ import annotations

import configparser
import re
import shlex
from pathlib import Path

import pytest

from azsidecar.cli import build_parser
from tests.integration.deploy._hcl import EXAMPLE, MODULES, ROOT, attr, parse, render_template, variables

SYSTEMD = ROOT / "deploy" / "systemd"
CONFIG_FILE = "/run/azsidecar/azsidecar.toml"


def _typed_names():
    type_expr = attr(variables(MODULES / "config")["settings"], "type")
    return set(re.findall(r"\\?'(\w+)\\?':", type_expr))


def _names_in(value):
    if isinstance(value, dict):
        out = set(value)
        for v in value.values():
            out |= _names_in(v)
        return out
    if isinstance(value, list):
        return set().union(*(_names_in(v) for v in value)) if value else set()
    if isinstance(value, str):
        return set(re.findall(r"\\?'(\w+)\\?':", value))
    return set()


def test_settings_built_by_sidecar_and_agents_use_only_declared_keys():
    # Terraform would silently drop an undeclared attribute when converting to the object type.
    typed = _typed_names()
    sidecar = attr(parse(MODULES / "sidecar" / "main.tf")["locals"][0], "settings")
    assert _names_in(sidecar) - typed == set()
    assert {"zone", "proxy", "upstream", "router", "wal", "notify", "audit"} <= set(sidecar)
    agents_main = parse(MODULES / "agents" / "main.tf")
    common = attr(agents_main["locals"][0], "common_settings")
    assert _names_in(common) - typed == set()
    per_zone = attr(agents_main["module"][0]["config"], "settings")
    assert _names_in(per_zone) - typed == set()
    assert {"zone", "agent", "listen_host", "metrics_port"} <= _names_in(per_zone)


def test_gc_gets_the_sidecars_ack_modes_and_the_example_passes_one_map_to_both():
    # GC keeps an unapplied object holding acknowledged (ack_mode wal) entries only if its own
    # configuration names those topics (azsidecar/run_gc.py builds that test from router.ack_modes).
    modules = {name: body for entry in parse(MODULES / "agents" / "main.tf")["module"] for name, body in entry.items()}
    gc_settings = attr(modules["gc_config"], "settings").replace(" ", "")
    assert "'router':{'ack_modes':'${var.ack_modes}'}" in gc_settings
    assert "ack_modes" not in attr(modules["config"], "settings")  # agents do not use them
    example = {name: body for entry in parse(EXAMPLE / "main.tf")["module"] for name, body in entry.items()}
    assert attr(example["agents"], "ack_modes") == "${var.ack_modes}"
    assert attr(example["sidecar"], "router") == {"ack_modes": "${var.ack_modes}"}
    assert attr(example["wal_bucket"], "wal_expiration_days") == "${var.wal.expiration_days}"


def test_sidecar_container_maps_only_the_metrics_port_and_only_when_it_leaves_loopback():
    sidecar = parse(MODULES / "sidecar" / "main.tf")["locals"][0]
    mappings = attr(sidecar, "container_definition")["portMappings"]
    assert mappings == ("${local.metrics_on_eni ? [{'containerPort': '${var.metrics_port}', 'protocol': 'tcp', "
                        "'name': 'metrics'}] : []}")
    assert attr(sidecar, "metrics_on_eni") == "${var.metrics_port != 0 && !contains(['127.0.0.1', '::1'],var.metrics_host)}"
    assert attr(sidecar, "settings")["proxy"]["listen_host"] == "127.0.0.1"  # Kafka never leaves loopback


def _exec_commands(path: Path) -> list[str]:
    """Every `exec azsidecar ...` command line written in a module's main.tf."""
    text = path.read_text()
    out = []
    for m in re.finditer(r'exec (azsidecar [^\n]*?)(?<!\\)"(?:\]|,|\s*$)', text, re.MULTILINE):
        cmd = m.group(1)
        cmd = cmd.replace("${local.config_file}", CONFIG_FILE).replace("${each.key}", "use1-az1")
        cmd = cmd.replace('\\"${var.proxy_id_prefix}-$(hostname)\\"', "sidecar-ip-10-40-0-5")
        assert "${" not in cmd and "$(" not in cmd, cmd
        out.append(cmd)
    return out


def test_ecs_commands_parse_with_the_real_cli():
    parser = build_parser()
    agent_cmds = _exec_commands(MODULES / "agents" / "main.tf")
    sidecar_cmds = _exec_commands(MODULES / "sidecar" / "main.tf")
    assert len(agent_cmds) == 2 and len(sidecar_cmds) == 1, (agent_cmds, sidecar_cmds)
    parsed = [parser.parse_args(shlex.split(c)[1:]) for c in agent_cmds + sidecar_cmds]
    by_command = {a.command: a for a in parsed}
    assert set(by_command) == {"agent", "gc", "proxy"}
    assert by_command["agent"].zone == "use1-az1" and by_command["agent"].config == CONFIG_FILE
    assert by_command["gc"].config == CONFIG_FILE
    assert by_command["proxy"].proxy_id == "sidecar-ip-10-40-0-5"


def _unit(text: str) -> configparser.ConfigParser:
    unit = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    unit.optionxform = str  # systemd keys are case-sensitive
    unit.read_string(text)
    return unit


def _exec_start_argv(unit: configparser.ConfigParser, instance: str = "use1-az1") -> list[str]:
    line = unit["Service"]["ExecStart"].replace("%H", "ip-10-40-0-5").replace("%i", instance)
    argv = shlex.split(line)
    assert argv[0] == "/usr/local/bin/azsidecar"
    return argv[1:]


@pytest.mark.parametrize("name,command", [
    ("azsidecar-proxy.service", "proxy"),
    ("azsidecar-agent@.service", "agent"),
    ("azsidecar-gc.service", "gc"),
])
def test_static_systemd_units_run_real_subcommands(name, command):
    unit = _unit((SYSTEMD / name).read_text())
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    assert unit["Service"]["User"] == "azsidecar"
    args = build_parser().parse_args(_exec_start_argv(unit))
    assert args.command == command
    if command == "agent":
        assert args.zone == "use1-az1"
    if command in ("proxy", "agent"):
        pre = unit["Service"]["ExecStartPre"]
        assert "AZSIDECAR_NOTIFY_HMAC_KEYS=%%s" in pre and "$$(aws ssm get-parameter" in pre
        assert unit["Service"]["EnvironmentFile"].startswith("-/run/azsidecar")
        post = build_parser().parse_args(shlex.split(unit["Service"]["ExecStartPost"])[1:])
        assert (post.command, post.port, post.check, post.wait_s) == ("status", 9464, "live", 60.0)


@pytest.mark.parametrize("arn,fetch", [
    ("arn:aws:ssm:us-east-1:123456789012:parameter/azsidecar/keys",
     "aws ssm get-parameter --region us-east-1 --name /azsidecar/keys --with-decryption"),
    ("arn:aws:secretsmanager:us-east-1:123456789012:secret:demo/notify-hmac-keys-AbCdEf",
     "aws secretsmanager get-secret-value --region us-east-1 --secret-id arn:aws:secretsmanager:"),
])
def test_rendered_sidecar_unit_fetches_the_keys_and_runs_the_proxy(arn, fetch):
    # The module's hmac_fetch expression, evaluated by hand for each kind of ARN.
    if ":ssm:" in arn:
        hmac_fetch = ("aws ssm get-parameter --region us-east-1 --name /azsidecar/keys "
                      "--with-decryption --query Parameter.Value --output text")
    else:
        hmac_fetch = (f"aws secretsmanager get-secret-value --region us-east-1 --secret-id {arn} "
                      "--query SecretString --output text")
    text = render_template((MODULES / "sidecar" / "azsidecar-proxy.service.tftpl").read_text(), {
        "config_file": "/etc/azsidecar/azsidecar.toml", "proxy_id_prefix": "sc", "hmac_fetch": hmac_fetch})
    unit = _unit(text)
    assert fetch in unit["Service"]["ExecStartPre"]
    args = build_parser().parse_args(_exec_start_argv(unit))
    assert (args.command, args.config, args.proxy_id) == ("proxy", "/etc/azsidecar/azsidecar.toml", "sc-ip-10-40-0-5")
    main = (MODULES / "sidecar" / "main.tf").read_text()
    assert 'aws ssm get-parameter --region ${var.region} --name ${local.hmac_ssm_name} --with-decryption' in main
    assert 'aws secretsmanager get-secret-value --region ${var.region} --secret-id ${var.hmac_secret_arn}' in main
