"""`azsidecar proxy`: run the sidecar's Kafka listener."""

from __future__ import annotations

import argparse
import logging
import signal

import trio

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
    from proxy.app import run_sidecar  # noqa: PLC0415

    config = load_config(args.config, overrides_from_args(args))
    if config.proxy.metrics_port:
        from prometheus_client import start_http_server  # noqa: PLC0415

        start_http_server(config.proxy.metrics_port, addr=config.proxy.listen_host)
    trio.run(_serve_until_signal, config)
    return 0


async def _serve_until_signal(config) -> None:
    from proxy.app import run_sidecar  # noqa: PLC0415

    async with trio.open_nursery() as nursery:
        server, port = await nursery.start(run_sidecar, config)
        log.info("proxy %s listening on %s:%d (zone %s)", config.proxy.proxy_id, config.proxy.listen_host,
                 port, config.zone)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                log.info("shutting down: draining in-flight requests (up to %ss)", config.proxy.shutdown_grace_s)
                await server.shutdown()
                nursery.cancel_scope.cancel()
                return
