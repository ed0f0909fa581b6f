"""`azsidecar proxy`: run the sidecar's Kafka listener."""

from __future__ import annotations

import argparse
import functools
import logging
import signal
from collections.abc import Mapping
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from azsidecar.config import Config

log = logging.getLogger("azsidecar.proxy")


def register(subparsers: argparse._SubParsersAction) -> None:
    from azsidecar.cli import add_common_arguments  # noqa: PLC0415

    p = subparsers.add_parser("proxy", help="run the sidecar proxy (Kafka listener for local producers)",
                              description="Serve unmodified Kafka producers on localhost and route their "
                                          "batches to the upstream cluster, through S3 across zones.")
    add_common_arguments(p)
    p.add_argument("--listen", metavar="HOST:PORT", help="client listener (default 127.0.0.1:9092)")
    p.add_argument("--bootstrap-servers", metavar="HOST:PORT[,...]", help="upstream Kafka cluster")
    p.add_argument("--proxy-id", help="this sidecar's id in WAL keys and audit records")
    p.add_argument("--metrics-port", type=int, help="serve Prometheus /metrics on this port (0 = off)")
    p.set_defaults(func=main)

    u = subparsers.add_parser("proxy-user", help="print a users-file entry for the proxy's SASL listener",
                              description="Read a password from stdin and print the SCRAM keys (salted, never "
                                          "the password) to append to proxy.sasl_users_file.")
    u.add_argument("username")
    u.add_argument("--mechanism", action="append", choices=["SCRAM-SHA-256", "SCRAM-SHA-512"],
                   help="repeatable; default both (PLAIN logins check against the stored keys)")
    u.add_argument("--iterations", type=int, default=8192, help="PBKDF2 iterations, 4096..16384 (default 8192)")
    u.set_defaults(func=user_main)


def user_main(args: argparse.Namespace) -> int:
    import sys  # noqa: PLC0415

    from proxy.sasl import format_credential, scram_credential  # noqa: PLC0415

    password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        print("proxy-user: no password on stdin", file=sys.stderr)
        return 2
    try:
        entries = [format_credential(args.username, scram_credential(password, m, iterations=args.iterations))
                   for m in args.mechanism or ["SCRAM-SHA-256", "SCRAM-SHA-512"]]
    except ValueError as exc:
        print(f"proxy-user: {exc}", file=sys.stderr)
        return 2
    print("\n".join(entries), end="")
    return 0


def apply_secrets(config: Config, environ: Mapping[str, str]) -> Config:
    """`config` with the upstream SASL password filled in from its file or `environ`.

    Raises ConfigError if the password was put in the config file (secrets never live
    there), or SASL is on and no password can be found.
    """
    import dataclasses  # noqa: PLC0415

    from azsidecar._configload import ConfigError  # noqa: PLC0415
    from proxy.tls import upstream_sasl_password  # noqa: PLC0415

    if config.upstream.sasl_password:
        raise ConfigError("upstream.sasl_password: secrets are not read from the config file; "
                          "use upstream.sasl_password_file or $AZSIDECAR_UPSTREAM_SASL_PASSWORD")
    password = upstream_sasl_password(config.upstream, environ)
    return dataclasses.replace(config, upstream=dataclasses.replace(config.upstream, sasl_password=password))


def overrides_from_args(args: argparse.Namespace) -> dict:
    out: dict = {"zone": args.zone, "log_format": args.log_format, "log_level": args.log_level}
    if args.listen:
        host, _, port = args.listen.rpartition(":")
        if not host or not port.isdigit():
            from azsidecar._configload import ConfigError  # noqa: PLC0415

            raise ConfigError(f"--listen: expected HOST:PORT, got {args.listen!r}")
        out["proxy.listen_host"], out["proxy.listen_port"] = host, int(port)
    if args.bootstrap_servers:
        out["upstream.bootstrap_servers"] = [s.strip() for s in args.bootstrap_servers.split(",") if s.strip()]
    out["proxy.proxy_id"] = args.proxy_id
    out["proxy.metrics_port"] = args.metrics_port
    return out


def main(args: argparse.Namespace) -> int:
    from azsidecar.config import load_config  # noqa: PLC0415

    import dataclasses  # noqa: PLC0415
    import os  # noqa: PLC0415

    from azsidecar._configload import ConfigError  # noqa: PLC0415
    from router.placement import ZoneUnknown, resolve_zone  # noqa: PLC0415

    overrides = overrides_from_args(args)
    overrides["imds_endpoint"] = os.environ.get("AZSIDECAR_IMDS_ENDPOINT")
    config = load_config(args.config, overrides)
    try:
        config = dataclasses.replace(config, zone=resolve_zone(config.zone, config.imds_endpoint))
    except ZoneUnknown as exc:
        raise ConfigError(str(exc)) from exc
    keys = os.environ.get("AZSIDECAR_NOTIFY_HMAC_KEYS")  # secrets come from the environment or files
    if keys and not config.notify.hmac_keys:
        config = dataclasses.replace(config, notify=dataclasses.replace(
            config.notify, hmac_keys=tuple(k for k in keys.split(",") if k)))
    config = apply_secrets(config, os.environ)
    from proxy.server import listener_security  # noqa: PLC0415

    listener_security(config.proxy)  # unreadable TLS or users files stop start-up here, with the key named
    if config.proxy.listen_host not in ("127.0.0.1", "::1", "localhost") and not config.proxy.sasl_mechanisms:
        log.warning("proxy listens on %s without SASL: anyone who reaches it can produce as this sidecar",
                    config.proxy.listen_host)
    if config.proxy.metrics_port:
        from prometheus_client import start_http_server  # noqa: PLC0415

        start_http_server(config.proxy.metrics_port, addr=config.proxy.metrics_host)
    trio.run(_serve_until_signal, config, args.config)
    return 0


async def _serve_until_signal(config, config_path: str | None) -> None:
    from proxy.app import run_sidecar  # noqa: PLC0415
    from spark_audit.writer import AuditWriter  # noqa: PLC0415

    audit = AuditWriter(config.audit, config.zone, "proxy") if config.audit.enabled else None
    try:
        await _serve(config, audit, run_sidecar, config_path)
    finally:
        if audit is not None:
            audit.close()


async def _serve(config, audit, run_sidecar, config_path: str | None) -> None:
    backends = []
    async with trio.open_nursery() as nursery:
        server, port = await nursery.start(
            functools.partial(run_sidecar, config, audit, on_backend=backends.append))
        log.info("proxy %s listening on %s:%d (zone %s)", config.proxy.proxy_id, config.proxy.listen_host,
                 port, config.zone)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for signum in signals:
                if signum == signal.SIGHUP:
                    _reload_policy(config_path, backends)
                    continue
                log.info("shutting down: draining in-flight requests (up to %ss)", config.proxy.shutdown_grace_s)
                await server.shutdown()
                nursery.cancel_scope.cancel()
                return


def _reload_policy(config_path, backends) -> None:
    """SIGHUP: re-read the config file and apply its router.policy (the one setting that
    changes at run time; the router drains a partition's old path before switching)."""
    from azsidecar._configload import ConfigError  # noqa: PLC0415
    from azsidecar.config import load_config  # noqa: PLC0415

    if config_path is None:
        log.warning("SIGHUP ignored: no --config file to reload")
        return
    try:
        policy = load_config(config_path).router.policy
    except ConfigError as exc:
        log.error("SIGHUP: config not reloaded: %s", exc)
        return
    for backend in backends:
        backend.set_policy(policy)
    log.info("SIGHUP: router policy is now %s", policy)
