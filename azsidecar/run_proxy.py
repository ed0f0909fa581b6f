"""`azsidecar proxy` and `azsidecar proxy-user`."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import os
import signal
import sys
from typing import Any

import trio

from azsidecar.broker_wait import probe_for, wait_for_brokers
from azsidecar.commands import HMAC_ENV
from azsidecar.config import Config, load_config, require_bootstrap_servers
from azsidecar.exposition import LabelledRegistry
from azsidecar.failures import EXIT_CONFIG, EXIT_ENVIRONMENT, StartupFailure
from azsidecar.health import ProxyHealth
from azsidecar.logs import setup_logging
from azsidecar.preflight import check_wal_store, startup_errors
from azsidecar.price_gauges import export_prices
from azsidecar.runtime import tune_allocator, tune_gc
from azsidecar.secrets import resolve_secrets
from azsidecar.sidecar import run_sidecar, wal_enabled
from azsidecar.status import StatusServer
from azsidecar.workers import die_with_parent, supervise
from core.addresses import is_loopback
from core.audit import AuditSink
from core.configload import ConfigError
from proxy.sasl import format_credential, scram_credential
from proxy.startup import listener_security
from router.backend import RoutingBackend
from router.placement import ZoneUnknown, resolve_zone
from spark_audit.writer import AuditWriter

log = logging.getLogger("azsidecar.proxy")


def user_main(args: argparse.Namespace) -> int:
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


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"zone": args.zone, "log_format": args.log_format, "log_level": args.log_level}
    if args.listen:
        host, _, port = args.listen.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"--listen: expected HOST:PORT, got {args.listen!r}")
        out["proxy.listen_host"], out["proxy.listen_port"] = host, int(port)
    out["upstream.bootstrap_servers"] = args.bootstrap_servers  # HOST:PORT[,...], split as in the file
    out["proxy.proxy_id"] = args.proxy_id
    out["proxy.metrics_port"] = args.metrics_port
    return out


def with_consumer_rack(config: Config) -> Config:
    """proxy.consumer_rack unset: this zone's AZ id, so consumers fetch from a replica in this
    zone wherever the cluster names brokers' racks by AZ id (MSK does) and runs the
    rack-aware replica selector; set (even to ""), it stays."""
    if config.proxy.consumer_rack is not None:
        return config
    return dataclasses.replace(config, proxy=dataclasses.replace(config.proxy, consumer_rack=config.zone or ""))


def main(args: argparse.Namespace) -> int:
    overrides = overrides_from_args(args)
    overrides["imds_endpoint"] = os.environ.get("AZSIDECAR_IMDS_ENDPOINT")
    config = load_config(args.config, overrides, os.environ)
    # the flags', else the variables' or the file's
    setup_logging(config.log_format, config.log_level, component="proxy", zone=config.zone)
    require_bootstrap_servers(config, "proxy")
    try:
        config = dataclasses.replace(config, zone=resolve_zone(config.zone, config.imds_endpoint))
    except ZoneUnknown as exc:
        raise ConfigError(str(exc)) from exc
    setup_logging(config.log_format, config.log_level, component="proxy", zone=config.zone)  # zone now known
    config = with_consumer_rack(config)
    config = resolve_secrets(config, os.environ, args.hmac_key_file)
    if wal_enabled(config) and not config.notify.hmac_keys:
        raise ConfigError(f"notify.hmac_keys: none given, and the WAL path (notify.agents of other zones) needs "
                          f"them: set ${HMAC_ENV} or notify.hmac_key_file, the same keys as the agents'")
    listener_security(config.proxy)  # unreadable TLS or users files stop start-up here, with the key named
    if wal_enabled(config):
        assert config.zone is not None  # wal_enabled: the zone is known
        check_wal_store(config.wal, config.wal.bucket_for(config.zone))
    if config.proxy.insecure_listener and not is_loopback(config.proxy.listen_host):
        log.warning("proxy listens on %s with proxy.insecure_listener: anyone who reaches it can produce as this "
                    "proxy, in clear text unless TLS is on", config.proxy.listen_host)
    if config.proxy.workers > 1:
        return supervise(config, functools.partial(worker_main, config_path=args.config))
    return serve(config, args.config)


def worker_main(config: Config, index: int, config_path: str | None) -> None:
    """One of `proxy.workers` processes (azsidecar/workers.py): a whole proxy with its own id."""
    die_with_parent()
    setup_logging(config.log_format, config.log_level, component="proxy", zone=config.zone)
    tune_gc()
    tune_allocator()
    try:
        code = serve(config, config_path)
    except ConfigError as exc:
        print(f"azsidecar: worker {index}: configuration error: {exc}", file=sys.stderr)
        code = EXIT_CONFIG
    except StartupFailure as exc:
        print(f"azsidecar: worker {index}: cannot start: {exc}", file=sys.stderr)
        code = EXIT_ENVIRONMENT
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


def serve(config: Config, config_path: str | None) -> int:
    """Serve until SIGTERM/SIGINT (status server and audit writer included); returns the exit code."""
    health = ProxyHealth(config.router.fallback)
    export_prices(config.router.prices, config.wal.storage_class)  # what the dashboard and alerts price savings with
    status = (StatusServer(config.proxy.metrics_host, config.proxy.metrics_port, health.live, health.checks,
                           LabelledRegistry("proxy", {"zone": config.zone or ""}))
              if config.proxy.metrics_port else None)
    try:
        with startup_errors():
            wait_for_brokers(config.upstream.bootstrap_servers, config.upstream.startup_wait_s,
                             config.upstream.connect_timeout_s, on_waiting=health.waiting_for_brokers,
                             probe=probe_for(config.upstream.security_protocol))
            health.brokers_reachable()
            trio.run(_serve_until_signal, config, config_path, health)
    finally:
        if status is not None:
            status.close()
    return 0


async def _serve_until_signal(config: Config, config_path: str | None, health: ProxyHealth) -> None:
    audit = AuditWriter(config.audit, config.zone or "", "proxy") if config.audit.enabled else None
    try:
        await _serve(config, audit, config_path, health)
    finally:
        if audit is not None:
            audit.close()


async def _serve(config: Config, audit: AuditSink | None, config_path: str | None, health: ProxyHealth) -> None:
    backends: list[RoutingBackend] = []
    async with trio.open_nursery() as nursery:
        server, port = await nursery.start(
            functools.partial(run_sidecar, config, audit, on_backend=backends.append, health=health))
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


def _reload_policy(config_path: str | None, backends: list[RoutingBackend]) -> None:
    """SIGHUP: re-read the config file and apply its router.policy (the one setting that
    changes at run time; the router drains a partition's old path before switching)."""
    if config_path is None:
        log.warning("SIGHUP ignored: no --config file to reload")
        return
    try:
        policy = load_config(config_path, environ=os.environ).router.policy
    except ConfigError as exc:
        log.error("SIGHUP: config not reloaded: %s", exc)
        return
    for backend in backends:
        backend.set_policy(policy)
    log.info("SIGHUP: router policy is now %s", policy)
