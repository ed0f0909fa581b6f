"""Every start-up failure is one line naming the setting or resource and the fix; exit code 2
for configuration, 1 for the environment; nothing is written to S3 before validation.

Each case runs the real command against the real moto server (or a closed port where the
point is that nothing answers).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.local.processes import DUMMY_CREDENTIALS, free_port

pytestmark = pytest.mark.integration

KEY = "0123456789abcdef-notify-key"
RUN_TIMEOUT_S = 60
NO_CREDENTIALS = {"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": "/nonexistent",
                  "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AWS_") and k not in ("AZSIDECAR_NOTIFY_HMAC_KEYS", "AZSIDECAR_UPSTREAM_SASL_PASSWORD")}
    return {**env, **NO_CREDENTIALS, **extra}


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "azsidecar", *args], env=env, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def proxy_config(path: Path, endpoint: str, bucket: str, bootstrap: str = "127.0.0.1:9") -> Path:
    path.write_text(f'zone = "use1-az1"\n[upstream]\nbootstrap_servers = ["{bootstrap}"]\n'
                    f'[wal]\nbucket = "{bucket}"\nregion = "us-east-1"\nprefix = "wal/"\nendpoint_url = "{endpoint}"\n'
                    f'[notify.agents]\n"use1-az2" = "127.0.0.1:9"\n')
    return path


def proxy_args(config: Path) -> list[str]:
    return ["proxy", "--config", str(config), "--listen", "127.0.0.1:0"]


def test_proxy_without_hmac_keys_is_a_config_error_and_writes_nothing(s3_bucket, tmp_path):
    server, bucket = s3_bucket
    config = proxy_config(tmp_path / "p.toml", server.endpoint_url, bucket)
    done = run(proxy_args(config), base_env(**DUMMY_CREDENTIALS))
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert "notify.hmac_keys" in line and "AZSIDECAR_NOTIFY_HMAC_KEYS" in line
    assert server.client().list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0  # no epoch object


def test_proxy_without_aws_credentials(s3_bucket, tmp_path):
    server, bucket = s3_bucket
    config = proxy_config(tmp_path / "p.toml", server.endpoint_url, bucket)
    done = run(proxy_args(config), base_env(AZSIDECAR_NOTIFY_HMAC_KEYS=KEY))
    assert done.returncode == 1
    assert "no AWS credentials" in one_line(done.stderr)


def test_proxy_without_the_bucket(moto_server, tmp_path):
    config = proxy_config(tmp_path / "p.toml", moto_server.endpoint_url, "no-such-bucket-here")
    done = run(proxy_args(config), base_env(AZSIDECAR_NOTIFY_HMAC_KEYS=KEY, **DUMMY_CREDENTIALS))
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert "wal.bucket" in line and "'no-such-bucket-here' does not exist" in line


def test_proxy_with_s3_unreachable(tmp_path):
    config = proxy_config(tmp_path / "p.toml", f"http://127.0.0.1:{free_port()}", "b")
    done = run(proxy_args(config), base_env(AZSIDECAR_NOTIFY_HMAC_KEYS=KEY, **DUMMY_CREDENTIALS))
    assert done.returncode == 1
    assert "wal.endpoint_url" in one_line(done.stderr)


def agent_args(config: Path) -> list[str]:
    return ["agent", "--config", str(config), "--zone", "use1-az2", "--listen", "127.0.0.1:0",
            "--bootstrap-servers", "127.0.0.1:9"]


def test_agent_without_aws_credentials(s3_bucket, tmp_path):
    server, bucket = s3_bucket
    config = proxy_config(tmp_path / "a.toml", server.endpoint_url, bucket)
    done = run(agent_args(config), base_env(AZSIDECAR_NOTIFY_HMAC_KEYS=KEY))
    assert done.returncode == 1
    assert "no AWS credentials" in one_line(done.stderr)


def test_agent_without_the_bucket(moto_server, tmp_path):
    config = proxy_config(tmp_path / "a.toml", moto_server.endpoint_url, "no-such-bucket-here")
    done = run(agent_args(config), base_env(AZSIDECAR_NOTIFY_HMAC_KEYS=KEY, **DUMMY_CREDENTIALS))
    assert done.returncode == 1
    assert "'no-such-bucket-here' does not exist" in one_line(done.stderr)


def test_agent_without_keys(s3_bucket, tmp_path):
    server, bucket = s3_bucket
    config = proxy_config(tmp_path / "a.toml", server.endpoint_url, bucket)
    done = run(agent_args(config), base_env(**DUMMY_CREDENTIALS))
    assert done.returncode == 2
    assert "AZSIDECAR_NOTIFY_HMAC_KEYS" in one_line(done.stderr)


def test_gc_without_the_bucket(moto_server, tmp_path):
    config = proxy_config(tmp_path / "g.toml", moto_server.endpoint_url, "no-such-bucket-here")
    done = run(["gc", "--config", str(config), "--once"], base_env(**DUMMY_CREDENTIALS))
    assert done.returncode == 1
    assert "'no-such-bucket-here' does not exist" in one_line(done.stderr)


def test_an_unparsable_config_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[proxy\nlisten_port = 1\n")
    done = run(["proxy", "--config", str(bad)], base_env())
    assert done.returncode == 2
    assert str(bad) in one_line(done.stderr)


def last_line(stderr: str) -> str:
    """The failure line; INFO lines of what happened before it may precede it."""
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.strip()][-1]


def test_agent_with_no_broker_answering(s3_bucket, tmp_path):
    server, bucket = s3_bucket
    config = proxy_config(tmp_path / "a.toml", server.endpoint_url, bucket)
    args = agent_args(config)
    address = f"127.0.0.1:{free_port()}"
    args[args.index("127.0.0.1:9")] = address
    done = run(args, base_env(AZSIDECAR_NOTIFY_HMAC_KEYS=KEY, AZSIDECAR__UPSTREAM__STARTUP_WAIT_S="0",
                              **DUMMY_CREDENTIALS))
    assert done.returncode == 1
    assert last_line(done.stderr) == (f"azsidecar: cannot start: upstream.bootstrap_servers: no broker of "
                                      f"['{address}'] answered: {address}: Connection refused")


@pytest.mark.parametrize(("wait", "within"), [("0", ""), ("1.6", " within 1.6 s (upstream.startup_wait_s)")])
def test_proxy_with_no_broker_answering(s3_bucket, tmp_path, wait, within):
    server, bucket = s3_bucket
    address = f"127.0.0.1:{free_port()}"
    config = proxy_config(tmp_path / "p.toml", server.endpoint_url, bucket, bootstrap=address)
    done = run(proxy_args(config), base_env(AZSIDECAR_NOTIFY_HMAC_KEYS=KEY, AZSIDECAR__UPSTREAM__STARTUP_WAIT_S=wait,
                                            **DUMMY_CREDENTIALS))
    assert done.returncode == 1
    assert last_line(done.stderr) == (f"azsidecar: cannot start: upstream.bootstrap_servers: no broker of "
                                      f"['{address}'] answered{within}: {address}: Connection refused")
    # waiting, it said so (and retried) before giving up
    assert ("no upstream broker reachable yet, retrying (upstream.startup_wait_s = 1.6)" in done.stderr) == bool(within)


NO_BUCKET = ("wal.bucket: must be set: there is no default bucket, since a fixed name may belong to another AWS "
             "account; name a bucket your account owns (and set wal.expected_bucket_owner to your account id), "
             "in the config file or as AZSIDECAR__WAL__BUCKET")


@pytest.mark.parametrize(("args", "why"), [
    (["gc", "--once"], " (azsidecar gc reads or deletes WAL objects; or give --bucket where the command has it)"),
    (["agent", "--zone", "use1-az2", "--listen", "127.0.0.1:0"],
     " (azsidecar agent reads or deletes WAL objects; or give --bucket where the command has it)"),
    (["config", "validate"], "; it is needed here because notify.agents names agents (the WAL route is on)"),
])
def test_no_default_bucket(args, why, tmp_path):
    config = tmp_path / "nobucket.toml"
    config.write_text('zone = "use1-az1"\n[upstream]\nbootstrap_servers = ["127.0.0.1:9"]\n'
                      + ('[notify.agents]\n"use1-az2" = "127.0.0.1:9"\n' if args[0] == "config" else ""))
    done = run([*args, "--config", str(config)], base_env(**DUMMY_CREDENTIALS, AZSIDECAR_NOTIFY_HMAC_KEYS=KEY))
    assert done.returncode == 2, done.stderr
    assert one_line(done.stderr) == f"azsidecar: configuration error: {NO_BUCKET}{why}"
