"""TLS contexts for the client listener and for upstream brokers, and secrets read from files.

Strategy: contexts are built once at start-up from file paths in the config, with the
standard library's defaults (TLS 1.2 minimum, certificate and hostname verification on
for the upstream side); a wrong path or a key that does not match its certificate stops
start-up with a ConfigError naming the key. The listener wraps accepted sockets in
trio.SSLStream, the upstream client wraps its connections the same way. Secrets (the
upstream SASL password, the notification keys, the listener's private key and users
file) come from files that only their owner can read, or from the environment; they are
read at start-up and never appear in a repr, a log line or a metric.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping

from core.configload import ConfigError
from core.upstream_settings import UpstreamSettings

TLS_MIN_VERSION = ssl.TLSVersion.TLSv1_2  # MSK and Kafka 3.x accept 1.2 and 1.3
HANDSHAKE_TIMEOUT_S = 10.0  # a client that opens TCP and never finishes TLS is dropped
UPSTREAM_PASSWORD_ENV = "AZSIDECAR_UPSTREAM_SASL_PASSWORD"


def check_private(path: str, key: str) -> None:
    """Refuse a secret file that group or others may read or write.

    Raises ConfigError naming the setting, the path and its mode (and how to fix it).
    """
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path}: {exc.strerror}") from exc
    if mode & 0o077:
        raise ConfigError(f"{key}: {path} has mode {mode & 0o777:04o}; a secret file must be readable by its "
                          f"owner only (chmod 600 {path})")


def server_context(cert_file: str, key_file: str, client_ca_file: str = "") -> ssl.SSLContext:
    """Context for the client listener; with `client_ca_file`, a client certificate signed by
    it is required (mutual TLS). Raises ConfigError if the files cannot be loaded or the
    private key file is readable by group or others."""
    check_private(key_file, "proxy.tls_key_file")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = TLS_MIN_VERSION
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"proxy.tls_cert_file/tls_key_file: cannot load {cert_file} with {key_file}: {exc}") from exc
    if client_ca_file:
        try:
            context.load_verify_locations(cafile=client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"proxy.tls_client_ca_file: cannot load {client_ca_file}: {exc}") from exc
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def client_context(ca_file: str = "", check_hostname: bool = True) -> ssl.SSLContext:
    """Context for upstream brokers: `ca_file` (PEM) or the system's CAs. Raises ConfigError."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.minimum_version = TLS_MIN_VERSION
    if ca_file:
        try:
            context.load_verify_locations(cafile=ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"upstream.tls_ca_file: cannot load {ca_file}: {exc}") from exc
    context.check_hostname = check_hostname
    return context


def read_secret_file(path: str, key: str) -> str:
    """The first line of `path` (a mounted secret), without its newline.

    Raises ConfigError if it cannot be read, is empty, or is readable by group or others.
    """
    check_private(path, key)
    try:
        with open(path, encoding="utf-8") as f:
            secret = f.readline().rstrip("\r\n")
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path}: {exc.strerror}") from exc
    if not secret:
        raise ConfigError(f"{key}: {path} is empty")
    return secret


def upstream_sasl_password(upstream: UpstreamSettings, environ: Mapping[str, str]) -> str:
    """The upstream SASL password: `sasl_password_file` if set, else $AZSIDECAR_UPSTREAM_SASL_PASSWORD.

    `upstream` is an UpstreamConfig. Returns "" when SASL is off or uses MSK IAM tokens. Raises ConfigError when
    SASL is on and neither source gives a password.
    """
    if upstream.sasl_mechanism in ("", "OAUTHBEARER"):  # OAUTHBEARER: MSK IAM, no password
        return ""
    path = upstream.sasl_password_file
    if path:
        return read_secret_file(path, "upstream.sasl_password_file")
    password = environ.get(UPSTREAM_PASSWORD_ENV, "")
    if not password:
        raise ConfigError(f"upstream.sasl_mechanism is set: give upstream.sasl_password_file or ${UPSTREAM_PASSWORD_ENV}")
    return password
