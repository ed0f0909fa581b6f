"""Fixtures for the security tests: a throwaway CA, a users file, and proxy processes with
TLS and/or SASL on their listener in front of the session's Tansu broker."""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.proxy.conftest import ProxyProcess, start_proxy
from tests.integration.security._certs import CertFiles, make_certs

USER = "alice"
PASSWORD = "alice-Pw-7c1f9e"  # what clients log in with; must never show up in a log
UPSTREAM_PASSWORD = "sidecar-Up-4b2d8a"  # the downstream proxy's own password at the upstream proxy


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> CertFiles:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def users_file(tmp_path_factory) -> Path:
    """Users file made by `azsidecar proxy-user` (both SCRAM mechanisms) for USER and 'sidecar'.

    The command runs in this process (`azsidecar.cli.main`, stdin and stdout swapped): as a
    subprocess under `make test` (nice 10 beside the system tier) its interpreter start
    once took over 30 s. Its run as a command of its own is tested by the Kafka authorization
    tests and tests/integration/azsidecar/test_cli_flags.py."""
    from azsidecar.cli import main

    path = tmp_path_factory.mktemp("users") / "users.toml"
    entries = []
    for user, password in ((USER, PASSWORD), ("sidecar", UPSTREAM_PASSWORD)):
        out = io.StringIO()
        stdin, sys.stdin = sys.stdin, io.StringIO(password + "\n")
        try:
            with contextlib.redirect_stdout(out):
                assert main(["proxy-user", user, "--iterations", "4096"]) == 0
        finally:
            sys.stdin = stdin
        assert password not in out.getvalue()
        entries.append(out.getvalue())
    path.write_text("\n".join(entries))
    path.chmod(0o600)  # SCRAM keys: the proxy refuses a users file others can read
    return path


def _toml(log_dir: Path, name: str, proxy: dict[str, object], upstream: dict[str, object] | None = None) -> Path:
    def value(v: object) -> str:
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(f'"{x}"' for x in v) + "]"
        if isinstance(v, bool):
            return "true" if v else "false"
        return f'"{v}"'

    lines = ["[audit]", f'output = "{log_dir / f"audit-{name}"}"', "[proxy]"]
    lines += [f"{k} = {value(v)}" for k, v in proxy.items()]
    if upstream:
        lines.append("[upstream]")
        lines += [f"{k} = {value(v)}" for k, v in upstream.items()]
    path = log_dir / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@contextlib.contextmanager
def secured_proxy(upstream_bootstrap: str, log_dir: Path, name: str, proxy: dict[str, object],
                  upstream: dict[str, object] | None = None, log_level: str = "INFO") -> Iterator[ProxyProcess]:
    """`azsidecar proxy` with these [proxy] and [upstream] settings; terminated on exit."""
    config = _toml(log_dir, name, proxy, upstream)
    with start_proxy(upstream_bootstrap, log_dir, ("--log-level", log_level), config_file=config) as p:
        yield p


@pytest.fixture(scope="module")
def tls_proxy(tansu, certs, tmp_path_factory) -> Iterator[ProxyProcess]:
    with secured_proxy(tansu.bootstrap, tmp_path_factory.mktemp("tls-proxy"), "tls",
                       {"tls_cert_file": certs.cert_file, "tls_key_file": certs.key_file}) as p:
        yield p


@pytest.fixture(scope="module")
def sasl_ssl_proxy(tansu, certs, users_file, tmp_path_factory) -> Iterator[ProxyProcess]:
    with secured_proxy(tansu.bootstrap, tmp_path_factory.mktemp("sasl-ssl-proxy"), "sasl-ssl",
                       {"tls_cert_file": certs.cert_file, "tls_key_file": certs.key_file,
                        "sasl_mechanisms": ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
                        "sasl_users_file": users_file}, log_level="DEBUG") as p:
        yield p


@pytest.fixture(scope="module")
def sasl_plaintext_proxy(tansu, users_file, tmp_path_factory) -> Iterator[ProxyProcess]:
    with secured_proxy(tansu.bootstrap, tmp_path_factory.mktemp("sasl-proxy"), "sasl",
                       {"sasl_mechanisms": ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
                        "sasl_users_file": users_file}, log_level="DEBUG") as p:
        yield p
