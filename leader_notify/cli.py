"""`azsidecar agent`: run the zone agent that appends WAL entries to the partition leaders.

HMAC keys come from AZSIDECAR_NOTIFY_HMAC_KEYS (comma-separated) or --hmac-key-file (one key
per line); this CLI layer is the only place that reads them (library code reads no env).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal

log = logging.getLogger("azsidecar.agent")

HMAC_ENV = "AZSIDECAR_NOTIFY_HMAC_KEYS"


def register(subparsers: argparse._SubParsersAction) -> None:
    from azsidecar.cli import add_common_arguments  # noqa: PLC0415

    p = subparsers.add_parser("agent", help="run the zone agent (S3 -> partition leader appends)",
                              description="Serve notifications from proxies in other zones: read this zone's "
                                          "share of each WAL object from S3 and append the raw batches.")
    add_common_arguments(p)
    p.add_argument("--listen", metavar="HOST:PORT", help="notification listener (default 127.0.0.1:9400)")
    p.add_argument("--bootstrap-servers", metavar="HOST:PORT[,...]", help="this zone's Kafka cluster")
    p.add_argument("--hmac-key-file", metavar="FILE", help=f"HMAC keys, one per line (else ${HMAC_ENV})")
    p.add_argument("--metrics-port", type=int, help="serve Prometheus /metrics on this port (0 = off)")
    p.set_defaults(func=main)


def overrides_from_args(args: argparse.Namespace, keys: tuple[str, ...]) -> dict:
    from azsidecar._configload import ConfigError  # noqa: PLC0415

    out: dict = {"zone": args.zone, "log_format": args.log_format, "log_level": args.log_level,
                 "agent.metrics_port": args.metrics_port}
    if args.listen:
        host, _, port = args.listen.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"--listen: expected HOST:PORT, got {args.listen!r}")
        out["agent.listen_host"], out["agent.listen_port"] = host, int(port)
    if args.bootstrap_servers:
        out["upstream.bootstrap_servers"] = [s.strip() for s in args.bootstrap_servers.split(",") if s.strip()]
    if keys:
        out["notify.hmac_keys"] = list(keys)
    return out


def read_keys(args: argparse.Namespace) -> tuple[str, ...]:
    """Keys from --hmac-key-file or the environment; raises ConfigError if the file is unreadable."""
    from azsidecar._configload import ConfigError  # noqa: PLC0415

    if args.hmac_key_file:
        try:
            with open(args.hmac_key_file) as f:
                return tuple(line.strip() for line in f if line.strip())
        except OSError as exc:
            raise ConfigError(f"--hmac-key-file: {exc}") from exc
    return tuple(k.strip() for k in os.environ.get(HMAC_ENV, "").split(",") if k.strip())


def main(args: argparse.Namespace) -> int:
    from azsidecar._configload import ConfigError  # noqa: PLC0415
    from azsidecar.config import load_config  # noqa: PLC0415

    from proxy.cli import apply_secrets  # noqa: PLC0415 - one place decides where secrets come from

    config = apply_secrets(load_config(args.config, overrides_from_args(args, read_keys(args))), os.environ)
    if not config.zone:
        raise ConfigError("zone: the agent needs --zone (or zone in the config file)")
    if not config.notify.hmac_keys:
        raise ConfigError(f"notify.hmac_keys: none given (set ${HMAC_ENV} or --hmac-key-file)")
    return asyncio.run(_serve_until_signal(config))


async def _serve_until_signal(config) -> int:
    from leader_notify._kafka import KafkaAppendUnavailable  # noqa: PLC0415
    from leader_notify._run import running_agent  # noqa: PLC0415
    from leader_notify.metrics import process_agent_metrics  # noqa: PLC0415
    from spark_audit.writer import AuditWriter  # noqa: PLC0415

    metrics = process_agent_metrics()
    if config.agent.metrics_port:
        from prometheus_client import start_http_server  # noqa: PLC0415

        # The default registry: the agent's own counters and the WAL reader's block cache.
        start_http_server(config.agent.metrics_port, addr=config.agent.listen_host)
    audit = AuditWriter(config.audit, config.zone, "agent") if config.audit.enabled else None
    if audit is None:
        from spark_audit.records import NullAuditSink  # noqa: PLC0415

        audit = NullAuditSink()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    keys = tuple(k.encode() for k in config.notify.hmac_keys)
    try:
        async with running_agent(config, config.zone, keys, audit=audit, metrics=metrics) as (_agent, port):
            # The line tests and scripts wait for; the port matters when --listen ends in :0.
            print(f"agent zone={config.zone} listening={config.agent.listen_host}:{port}", flush=True)
            await stop.wait()
            log.info("agent for zone %s shutting down", config.zone)
    except KafkaAppendUnavailable as exc:
        log.error("%s", exc)
        return 1
    finally:
        if hasattr(audit, "close"):
            audit.close()
    return 0
