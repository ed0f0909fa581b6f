"""deploy/terraform through the real terraform binary, as far as it goes offline.

The AWS provider cannot be downloaded here (no access to registry.terraform.io), so
`terraform validate` of the modules that require it cannot run. What needs no provider
does run, with terraform itself:
- `terraform fmt -check` over every file;
- the config module (templatefile and validations, no resources) applied with settings
  written by hand: Terraform fills the optional() defaults and renders the TOML, which
  azsidecar's loader then reads; a value outside a validation's range is refused with the
  module's message;
- the same settings rendered by tests/integration/deploy/_hcl.render_template, the renderer the other
  deploy tests use, must give the same text as terraform, for the config file and for the
  sidecar module's systemd unit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from azsidecar.config import load_config
from tests.integration.deploy._hcl import MODULES, TERRAFORM, render_template
from tests.unit.deploy.test_config_template import sidecar_settings

TERRAFORM_BIN = shutil.which("terraform")
TIMEOUT_S = 120  # init and apply of a provider-less root module take well under a second here
pytestmark = pytest.mark.skipif(TERRAFORM_BIN is None, reason="no terraform binary on this machine")

UNIT_TEMPLATE = MODULES / "sidecar" / "azsidecar-proxy.service.tftpl"
UNIT_VARS = {"config_file": "/etc/azsidecar/azsidecar.toml", "proxy_id_prefix": "sc",
             "hmac_fetch": "aws ssm get-parameter --region us-east-1 --name /azsidecar/keys --with-decryption "
                           "--query Parameter.Value --output text"}


def _terraform(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1", "TF_INPUT": "0",
           "TF_CLI_CONFIG_FILE": str(cwd / "no.terraformrc")}
    return subprocess.run([TERRAFORM_BIN, *args, "-no-color"] if args[0] != "fmt" else [TERRAFORM_BIN, *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


def _apply(tmp_path: Path, module_calls: str, outputs: str) -> subprocess.CompletedProcess:
    (tmp_path / "main.tf").write_text(module_calls + outputs)
    init = _terraform(tmp_path, "init", "-backend=false")
    assert init.returncode == 0, init.stderr
    return _terraform(tmp_path, "apply", "-auto-approve")


def _output(tmp_path: Path, name: str) -> str:
    done = _terraform(tmp_path, "output", "-raw", name)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_file_is_in_canonical_format():
    done = _terraform(TERRAFORM, "fmt", "-check", "-recursive", "-diff", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_terraform_renders_what_the_test_renderer_renders_and_the_loader_reads_it(tmp_path):
    settings = sidecar_settings()  # every attribute given, defaults included
    # jsonencode escapes <, > and & as \u003c..., which TOML basic strings read back.
    settings["upstream"] = {**settings["upstream"], "client_id": 'azsidecar "quoted" \\ <a&b> é'}
    # JSON is valid HCL for these values (objects, lists, quoted strings, numbers, null).
    calls = (f'module "full" {{\n  source   = "{MODULES / "config"}"\n  settings = {json.dumps(settings)}\n}}\n'
             f'module "minimal" {{\n  source   = "{MODULES / "config"}"\n  settings = {{\n'
             '    upstream = { bootstrap_servers = ["b-1:9092"] }\n'
             '    wal      = { bucket = "bkt", region = "us-east-1" }\n  }\n}\n')
    outputs = ('output "full" {\n  value = module.full.toml\n}\n'
               'output "minimal" {\n  value = module.minimal.toml\n}\n'
               f'output "unit" {{\n  value = templatefile("{UNIT_TEMPLATE}", {json.dumps(UNIT_VARS)})\n}}\n')
    done = _apply(tmp_path, calls, outputs)
    assert done.returncode == 0, done.stderr

    full = _output(tmp_path, "full")
    assert full == render_template((MODULES / "config" / "azsidecar.toml.tftpl").read_text(), settings)
    assert _output(tmp_path, "unit") == render_template(UNIT_TEMPLATE.read_text(), UNIT_VARS)

    path = tmp_path / "full.toml"
    path.write_text(full)
    config = load_config(path)
    assert config.upstream.client_id == 'azsidecar "quoted" \\ <a&b> é'  # jsonencode quoting survived
    assert "\\u003ca\\u0026b\\u003e" in full
    assert dict(config.router.ack_modes) == {"audit.*": "wal"}
    assert (config.upstream.security_protocol, config.upstream.sasl_mechanism) == ("SASL_SSL", "OAUTHBEARER")

    # The optional() defaults are Terraform's to fill; these are the config module's own.
    path = tmp_path / "minimal.toml"
    path.write_text(_output(tmp_path, "minimal"))
    minimal = load_config(path)
    assert minimal.zone is None
    assert (minimal.proxy.listen_host, minimal.proxy.listen_port, minimal.proxy.metrics_host) == (
        "127.0.0.1", 9092, "127.0.0.1")
    assert (minimal.wal.bucket, minimal.wal.prefix, minimal.wal.max_bytes, minimal.wal.linger_ms) == (
        "bkt", "wal/", 8_388_608, 250)
    assert (minimal.wal.checkpoint_prefix, minimal.wal.epoch_prefix) == ("_checkpoints", "_epochs")
    assert minimal.router.policy == "cost" and dict(minimal.notify.agents) == {}
    assert (minimal.upstream.security_protocol, minimal.upstream.sasl_mechanism) == ("PLAINTEXT", "")


@pytest.mark.parametrize("upstream,message", [
    ('{ bootstrap_servers = ["b-1:9098"], security_protocol = "SASL_PLAINTEXT", sasl_mechanism = "OAUTHBEARER", '
     'aws_msk_iam_region = "us-east-1" }', "upstream: OAUTHBEARER (MSK IAM) needs security_protocol SASL_SSL"),
    ('{ bootstrap_servers = ["b-1:9098"], security_protocol = "SASL_SSL", sasl_mechanism = "OAUTHBEARER" }',
     "upstream: OAUTHBEARER (MSK IAM) needs security_protocol SASL_SSL and aws_msk_iam_region"),
    ('{ bootstrap_servers = ["b-1:9098"], security_protocol = "SASL_SSL" }',
     "upstream.sasl_mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER) is required with SASL_*"),
])
def test_terraform_refuses_bad_upstream_security_with_the_module_message(tmp_path, upstream, message):
    calls = (f'module "c" {{\n  source   = "{MODULES / "config"}"\n  settings = {{\n'
             f'    upstream = {upstream}\n    wal      = {{ bucket = "bkt", region = "us-east-1" }}\n  }}\n}}\n')
    done = _apply(tmp_path, calls, 'output "toml" {\n  value = module.c.toml\n}\n')
    assert done.returncode != 0
    assert message in " ".join(done.stderr.split()), done.stderr


@pytest.mark.parametrize("wal,message", [
    ('{ bucket = "bkt", region = "us-east-1", linger_ms = 60001 }', "wal.linger_ms must be an integer within 1..60000."),
    ('{ bucket = "bkt", region = "us-east-1", max_bytes = 65535 }', "wal.max_bytes must be an integer within 64 KiB..5 GiB"),
    ('{ bucket = "bkt", region = "us-east-1", max_bytes = 134217728 }', "wal.max_buffered_bytes must be >= wal.max_bytes."),
])
def test_terraform_refuses_out_of_range_settings_with_the_module_message(tmp_path, wal, message):
    calls = (f'module "c" {{\n  source   = "{MODULES / "config"}"\n  settings = {{\n'
             f'    upstream = {{ bootstrap_servers = ["b-1:9092"] }}\n    wal      = {wal}\n  }}\n}}\n')
    done = _apply(tmp_path, calls, 'output "toml" {\n  value = module.c.toml\n}\n')
    assert done.returncode != 0
    assert message in " ".join(done.stderr.split()), done.stderr
